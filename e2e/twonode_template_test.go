package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSnapshotTemplateOnTwoNodes builds a template from a Dockerfile (a
// snapshot: template, whose tree only the node of the build sandbox's
// snapshot has) with two nodes live, then creates sandboxes of it until
// the scheduler would have spread them over both: every create must
// succeed and see the built file, and its placement event says why.
func TestSnapshotTemplateOnTwoNodes(t *testing.T) {
	dirA := newDataDir(t)
	in := startServer(t, dirA)
	defer in.stop()
	dirB := newDataDir(t)
	defer startNodeB(t, in, dirA, dirB)()
	waitNodes(t, in, "local", "node-b")

	dir := t.TempDir()
	df := filepath.Join(dir, "Dockerfile")
	if err := os.WriteFile(df, []byte("FROM minimal\nRUN echo built > /built\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, e, c := in.cli("", "template", "build", "dftwo", "--dockerfile", df, "--context", dir, "--build-runtime", "ns"); c != 0 {
		t.Fatalf("dockerfile build: exit %d\n%s\n%s", c, e, in.logs())
	}
	nodes := map[string]int{}
	var ids []string
	for i := range 6 {
		var sb struct {
			sandbox
			Message string `json:"message"`
		}
		code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "dftwo", "runtime": "ns", "memory_mib": 256}, &sb)
		if code != 201 || sb.State != "running" {
			t.Errorf("create %d of the snapshot template: HTTP %d, %s on %q: %s", i+1, code, sb.State, sb.Node, sb.Message)
			if sb.ID != "" {
				ids = append(ids, sb.ID)
			}
			continue
		}
		ids = append(ids, sb.ID)
		nodes[sb.Node]++
		if res := in.exec(sb.ID, "cat", "/built"); res.Stdout != "built\n" {
			t.Errorf("sandbox %s on %s: /built = %+v", sb.ID, sb.Node, res)
		}
	}
	t.Logf("sandboxes of the snapshot template by node: %v", nodes)
	if len(ids) > 0 {
		var list struct{ Events []benchEvent }
		in.do("GET", "/v1/sandboxes/"+ids[len(ids)-1]+"/events", nil, &list)
		said := false
		for _, e := range list.Events {
			said = said || strings.Contains(e.Message, "only [local] holds template dftwo")
		}
		if !said {
			t.Errorf("the last sandbox's events %+v do not say why it went to local", list.Events)
		}
	}
	for _, id := range ids {
		in.delete(id)
	}
	in.cli("", "template", "cache", "prune")
}

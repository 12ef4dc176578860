package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/mempressure"
)

// nodeMemory is the part of GET /v1/nodes the memory tests read.
type nodeMemory struct {
	ID             string `json:"id"`
	MemoryMiB      int    `json:"memory_mib"`
	CommittedMiB   int    `json:"committed_mib"`
	MemoryLimitMiB int    `json:"memory_limit_mib"`
	MemoryMeasured bool   `json:"memory_measured"`
	MemoryTotalMiB int    `json:"memory_total_mib"`
	AvailableMiB   int    `json:"available_mib"`
	UsedMiB        int    `json:"used_mib"`
	MemoryPressure string `json:"memory_pressure"`
}

// localNode returns the dev server's node as GET /v1/nodes shows it.
func (in *instance) localNode() nodeMemory {
	in.t.Helper()
	var list struct{ Nodes []nodeMemory }
	if code := in.do("GET", "/v1/nodes", nil, &list); code != http.StatusOK || len(list.Nodes) != 1 {
		in.t.Fatalf("GET /v1/nodes: HTTP %d %+v", code, list)
	}
	return list.Nodes[0]
}

// waitLocalNode waits up to 30 s for the node's listing to satisfy ok.
func (in *instance) waitLocalNode(what string, ok func(nodeMemory) bool) nodeMemory {
	in.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := in.localNode()
		if ok(n) {
			return n
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("node not %s after 30s: %+v", what, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestNodeMemoryAndPressureAdmission: the dev server's node reports its
// real memory (sane against MemTotal), GET /v1/nodes counts a created
// sandbox's limit as committed, and with memory pressure injected (the
// test-only override file) a create is refused 503 naming the pressure,
// then admitted again once the next heartbeat reports none.
func TestNodeMemoryAndPressureAdmission(t *testing.T) {
	dir := newDataDir(t)
	over := filepath.Join(dir, "test-memory-pressure")
	in := startServerEnv(t, dir, []string{failpoint.EnvVar + "=", mempressure.TestOverrideEnv + "=" + over}, "--memory-overcommit", "2")
	defer in.stop()

	n := in.waitLocalNode("measured", func(n nodeMemory) bool { return n.MemoryMeasured })
	if n.AvailableMiB <= 0 || n.AvailableMiB > n.MemoryTotalMiB || n.UsedMiB != n.MemoryTotalMiB-n.AvailableMiB || n.MemoryLimitMiB != 2*n.MemoryMiB || n.MemoryPressure != "" {
		t.Fatalf("the node's memory is not sane: %+v", n)
	}
	before := n.CommittedMiB
	var sb sandbox
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 384}, &sb); code != http.StatusCreated {
		t.Fatalf("create: HTTP %d", code)
	}
	defer in.delete(sb.ID)
	if n := in.localNode(); n.CommittedMiB != before+384 {
		t.Fatalf("committed %d MiB after a 384 MiB create, want %d", n.CommittedMiB, before+384)
	}
	out, errOut, code := in.cli("", "nodes", "list")
	if code != 0 || !strings.Contains(out, "COMMITTED") || !strings.Contains(out, "AVAILABLE") || !strings.Contains(out, "/"+strconv.Itoa(2*n.MemoryMiB)+" MiB") {
		t.Fatalf("space nodes list: exit %d\n%s%s", code, out, errOut)
	}

	if err := os.WriteFile(over, []byte("e2e injected pressure\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in.waitLocalNode("under pressure", func(n nodeMemory) bool { return strings.Contains(n.MemoryPressure, "e2e injected pressure") })
	var refused struct {
		Code, Reason, Message string
	}
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256}, &refused); code != http.StatusServiceUnavailable ||
		refused.Reason != "no_capacity" || !strings.Contains(refused.Message, "local: memory pressure (test override: e2e injected pressure)") {
		t.Fatalf("create under memory pressure: HTTP %d %+v, want 503 no_capacity naming the pressure", code, refused)
	}
	if out, _, _ := in.cli("", "nodes", "list"); !strings.Contains(out, "memory pressure: test override: e2e injected pressure") {
		t.Errorf("space nodes list under pressure does not show it:\n%s", out)
	}

	if err := os.Remove(over); err != nil {
		t.Fatal(err)
	}
	in.waitLocalNode("out of pressure", func(n nodeMemory) bool { return n.MemoryPressure == "" })
	var again sandbox
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256}, &again); code != http.StatusCreated {
		t.Fatalf("create once the pressure is over: HTTP %d", code)
	}
	in.delete(again.ID)
}

// TestMemoryPressureOverrideIgnoredOutsideTests: a server whose environment
// names the override file but does not set SPACE_FAILPOINTS (not a test
// process) measures memory for real and ignores the file.
func TestMemoryPressureOverrideIgnoredOutsideTests(t *testing.T) {
	if _, set := os.LookupEnv(failpoint.EnvVar); set {
		t.Skipf("%s is set in the test's environment: the server would inherit it", failpoint.EnvVar)
	}
	dir := newDataDir(t)
	over := filepath.Join(dir, "test-memory-pressure")
	if err := os.WriteFile(over, []byte("must be ignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := startServerEnv(t, dir, []string{mempressure.TestOverrideEnv + "=" + over})
	defer in.stop()
	n := in.waitLocalNode("measured", func(n nodeMemory) bool { return n.MemoryMeasured })
	// Two more heartbeats: the override would have shown by now.
	time.Sleep(5 * time.Second)
	if n = in.localNode(); strings.Contains(n.MemoryPressure, "must be ignored") {
		t.Fatalf("the override was honoured without %s: %+v", failpoint.EnvVar, n)
	}
	sb := in.create("minimal")
	in.delete(sb.ID)
}

package cli

import (
	"net/http"
	"strings"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// TestNodesListShowsMemory: `space nodes list` shows what each node's
// sandboxes commit of what they may, what it measured available of its
// total ("-" when it reports none), and its memory pressure.
func TestNodesListShowsMemory(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		writeJSONResp(w, 200, sandboxv1.NodeList{Nodes: []sandboxv1.Node{
			{ID: "n1", State: "ready", Live: true, Runtimes: []string{"ns"}, MemoryMiB: 18000, CommittedMiB: 1536, MemoryLimitMiB: 36000,
				MemoryMeasured: true, MemoryTotalMiB: 24000, AvailableMiB: 21000, UsedMiB: 3000},
			{ID: "n2", State: "ready", Live: true, Runtimes: []string{"ns"}, MemoryMiB: 1000, CommittedMiB: 0, MemoryLimitMiB: 1000,
				MemoryMeasured: false, MemoryTotalMiB: -1, AvailableMiB: -1, UsedMiB: -1},
			{ID: "n3", State: "ready", Live: true, Runtimes: []string{"ns"}, MemoryMiB: 1000, CommittedMiB: 900, MemoryLimitMiB: 1000,
				MemoryMeasured: true, MemoryTotalMiB: 1300, AvailableMiB: 100, UsedMiB: 1200, MemoryPressure: "MemAvailable 100 MiB of 1.3 GiB (7.7%) below 10%",
				RuntimeStatus: map[string]string{"ns": "ok"}},
		}})
	})
	fakeServer(t, mux)
	code, out, errOut := run(t, nil, "nodes", "list")
	if code != 0 {
		t.Fatalf("nodes list: exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "COMMITTED") || !strings.Contains(lines[0], "AVAILABLE") {
		t.Fatalf("nodes list output:\n%s", out)
	}
	for i, want := range [][]string{
		{"n1", "1536/36000 MiB", "21000/24000 MiB"},
		{"n2", "0/1000 MiB", " - "},
		{"n3", "900/1000 MiB", "100/1300 MiB", "memory pressure: MemAvailable 100 MiB of 1.3 GiB (7.7%) below 10%; ns: ok"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("row %d %q lacks %q", i+1, lines[i+1], w)
			}
		}
	}
}

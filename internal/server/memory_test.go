package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/scheduler"
)

// TestHeartbeatMemoryIsStoredListedAndAdmits: the memory a node's
// heartbeat reports is kept per node, shown by GET /v1/nodes beside what
// its sandboxes commit, and decides admission: under pressure a create is
// refused 503 naming the pressure, and the next heartbeat without it admits
// again. Figures that contradict each other are dropped as unreported.
func TestHeartbeatMemoryIsStoredListedAndAdmits(t *testing.T) {
	t.Parallel()
	cp := newControlPlane(t, Config{MemoryOvercommit: 2})
	admin := cp.adminKey()
	beat := func(m scheduler.Memory) {
		t.Helper()
		if _, err := heartbeatVia(t.Context(), nil, cp.url, "n1", testHeartbeat{Address: cp.nodeAddr, Token: "node-token",
			Runtimes: []string{"ns"}, CPUs: 64, MemoryMiB: 1 << 20, DiskMiB: 1 << 30, Memory: m}); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
	}

	n := cp.listedNode(admin, "n1")
	if n.MemoryMeasured || n.AvailableMiB != -1 || n.UsedMiB != -1 || n.MemoryTotalMiB != -1 || n.MemoryLimitMiB != 2<<20 || n.CommittedMiB != 0 {
		t.Fatalf("a node that reported no memory is listed %+v, want unreported (-1) and a limit of 2 x its memory", n)
	}

	beat(scheduler.Memory{Measured: true, TotalMiB: 24000, AvailableMiB: 20000})
	if got := cp.nodes.NodeMemory()["n1"]; got != (scheduler.Memory{Measured: true, TotalMiB: 24000, AvailableMiB: 20000}) {
		t.Fatalf("stored memory of n1: %+v", got)
	}
	cp.create(`{"template": "minimal", "memory_mib": 512}`)
	n = cp.listedNode(admin, "n1")
	if !n.MemoryMeasured || n.MemoryTotalMiB != 24000 || n.AvailableMiB != 20000 || n.UsedMiB != 4000 || n.CommittedMiB != 512 || n.MemoryPressure != "" {
		t.Fatalf("listed after a 512 MiB create: %+v", n)
	}

	beat(scheduler.Memory{Measured: true, TotalMiB: 24000, AvailableMiB: 800, Pressure: "MemAvailable 800 MiB of 23.4 GiB (3.3%) below 10%\x1b[2J"})
	n = cp.listedNode(admin, "n1")
	if n.MemoryPressure != "MemAvailable 800 MiB of 23.4 GiB (3.3%) below 10%[2J" {
		t.Fatalf("listed pressure %q, want it without control bytes", n.MemoryPressure)
	}
	code, e := cp.do(cp.key, http.MethodPost, "/v1/sandboxes", `{"template": "minimal", "memory_mib": 256}`, nil)
	if code != http.StatusServiceUnavailable || e.Reason != "no_capacity" || !strings.Contains(e.Message, "n1: memory pressure (MemAvailable 800 MiB") {
		t.Fatalf("create under memory pressure: HTTP %d %+v, want 503 no_capacity naming the pressure", code, e)
	}

	beat(scheduler.Memory{Measured: true, TotalMiB: 24000, AvailableMiB: 19000})
	cp.create(`{"template": "minimal", "memory_mib": 256}`)

	// Inconsistent figures are unreported; a reason without figures counts.
	for _, m := range []scheduler.Memory{
		{Measured: true, TotalMiB: 100, AvailableMiB: 200},
		{Measured: true, TotalMiB: 0, AvailableMiB: 0},
		{Measured: true, TotalMiB: 100, AvailableMiB: -1},
	} {
		beat(m)
		if got := cp.nodes.NodeMemory()["n1"]; got.Measured {
			t.Fatalf("heartbeat %+v stored as %+v, want unreported", m, got)
		}
	}
	beat(scheduler.Memory{Pressure: "psi some avg10=40.00 at or above 20"})
	if code, e := cp.do(cp.key, http.MethodPost, "/v1/sandboxes", `{"template": "minimal", "memory_mib": 256}`, nil); code != http.StatusServiceUnavailable || !strings.Contains(e.Message, "memory pressure (psi some avg10=40.00") {
		t.Fatalf("create under pressure without figures: HTTP %d %+v", code, e)
	}
}

// TestNodeMemoryForgetsSilentNodes: a node whose last heartbeat reached this
// replica longer than the heartbeat timeout ago is unreported, its old
// pressure included.
func TestNodeMemoryForgetsSilentNodes(t *testing.T) {
	n := NewNodes()
	n.observe("n1", nil, nil, nil, nil, scheduler.Memory{Measured: true, TotalMiB: 100, AvailableMiB: 5, Pressure: "low"})
	n.observe("n2", nil, nil, nil, nil, scheduler.Memory{Measured: true, TotalMiB: 100, AvailableMiB: 50})
	n.mu.Lock()
	obs := n.observed["n1"]
	obs.at = time.Now().Add(-scheduler.HeartbeatTimeout - time.Second)
	n.observed["n1"] = obs
	n.mu.Unlock()
	got := n.NodeMemory()
	if _, ok := got["n1"]; ok || got["n2"].AvailableMiB != 50 {
		t.Fatalf("NodeMemory = %+v, want n2 only", got)
	}
}

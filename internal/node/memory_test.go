package node

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/mempressure"
	"github.com/spacesandbox/space/internal/privop"
)

// TestHeartbeatCarriesMemory: every heartbeat carries the node's measured
// MemTotal and MemAvailable and its pressure verdict, re-measured each
// time; a node without a monitor, or whose measure fails, reports none.
func TestHeartbeatCarriesMemory(t *testing.T) {
	dir := t.TempDir()
	meminfo, psi := filepath.Join(dir, "meminfo"), filepath.Join(dir, "psi")
	write := func(availKiB int, some string) {
		os.WriteFile(meminfo, []byte("MemTotal: 8388608 kB\nMemAvailable: "+strconv.Itoa(availKiB)+" kB\n"), 0o600)
		os.WriteFile(psi, []byte("some avg10="+some+" avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), 0o600)
	}
	mon, err := mempressure.New(mempressure.Config{MeminfoPath: meminfo, PSIPath: psi})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(Config{NodeID: "node-a", DataDir: dir, Privileged: privop.NewClient("/nonexistent"), HostBridge: "/bin/true", Memory: mon},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	hello := &privop.Hello{Runtimes: []string{"ns"}}

	write(6*1024*1024, "0.00")
	hb := m.heartbeat(t.Context(), hello, "127.0.0.1:1")
	if !hb.MemoryMeasured || hb.MemoryTotalMib != 8192 || hb.AvailableMib != 6144 || hb.MemoryPressure != "" {
		t.Fatalf("heartbeat with 6 of 8 GiB free: measured %v total %d available %d pressure %q", hb.MemoryMeasured, hb.MemoryTotalMib, hb.AvailableMib, hb.MemoryPressure)
	}
	write(3*1024*1024, "42.00") // PSI counts while less than half is available
	hb = m.heartbeat(t.Context(), hello, "127.0.0.1:1")
	if !strings.Contains(hb.MemoryPressure, "psi some avg10=42.00") {
		t.Fatalf("heartbeat under PSI pressure: pressure %q", hb.MemoryPressure)
	}
	write(400*1024, "0.00")
	hb = m.heartbeat(t.Context(), hello, "127.0.0.1:1")
	if hb.AvailableMib != 400 || !strings.Contains(hb.MemoryPressure, "MemAvailable 400 MiB of 8.0 GiB") {
		t.Fatalf("heartbeat with 400 MiB free: available %d pressure %q", hb.AvailableMib, hb.MemoryPressure)
	}
	os.WriteFile(meminfo, []byte("garbage"), 0o600)
	hb = m.heartbeat(t.Context(), hello, "127.0.0.1:1")
	if hb.MemoryMeasured || hb.AvailableMib != 0 || hb.MemoryPressure != "" {
		t.Fatalf("heartbeat with an unreadable meminfo: %+v", hb)
	}

	if hb := newTestManager(t, t.TempDir()).heartbeat(t.Context(), hello, "127.0.0.1:1"); hb.MemoryMeasured {
		t.Fatalf("a node without a monitor reports memory: %+v", hb)
	}
}

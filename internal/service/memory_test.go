package service

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/scheduler"
	"github.com/spacesandbox/space/internal/store"
)

// memoryBeats is heartbeats that report mem for the nodes.
type memoryBeats struct{ mem map[string]scheduler.Memory }

func (memoryBeats) PendingRuntimes(string) []string           { return nil }
func (memoryBeats) WarmNodes(nodev1.PoolKey) map[string]int   { return nil }
func (b memoryBeats) NodeMemory() map[string]scheduler.Memory { return b.mem }

// TestPlacementReadsHeartbeatMemory: place and placeOn judge a node by the
// memory its heartbeats report: a node under pressure takes nothing, and
// with overcommit a node whose measured MemAvailable would fall under the
// reserve takes nothing either, whatever its committed sum allows.
func TestPlacementReadsHeartbeatMemory(t *testing.T) {
	st, tenant, _ := newTestStore(t)
	ctx := t.Context()
	for _, id := range []string{"n1", "n2"} {
		if err := st.PutNode(ctx, store.Node{ID: id, Address: id + ":7071", Runtimes: []string{"ns"}, State: store.NodeReady,
			Capacity: store.Resources{CPUs: 8, MemoryMiB: 8192, DiskMiB: 1 << 20}, LastHeartbeat: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	beats := memoryBeats{mem: map[string]scheduler.Memory{}}
	s := New(Config{Overcommit: scheduler.Overcommit{Ratio: 4, ReserveMiB: 256}}, st, nil, beats, time.Now(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	sb := sandbox.New(tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 512}, time.Now())

	beats.mem["n1"] = scheduler.Memory{Measured: true, TotalMiB: 8192, AvailableMiB: 4000, Pressure: "psi some avg10=33.00 at or above 20"}
	beats.mem["n2"] = scheduler.Memory{Measured: true, TotalMiB: 8192, AvailableMiB: 700}
	_, _, err := s.place(ctx, sb)
	if !errors.Is(err, errdefs.ErrNoCapacity) || !strings.Contains(err.Error(), "n1: memory pressure (psi some avg10=33.00") || !strings.Contains(err.Error(), "n2: 700 MiB really free, 512 needed plus a 256 MiB reserve") {
		t.Fatalf("place with n1 under pressure and n2 short: %v", err)
	}
	if _, err := s.placeOn(ctx, sb, "n1"); !errors.Is(err, errdefs.ErrNoCapacity) || !strings.Contains(err.Error(), "memory pressure") {
		t.Fatalf("placeOn n1 under pressure: %v", err)
	}

	beats.mem["n2"] = scheduler.Memory{Measured: true, TotalMiB: 8192, AvailableMiB: 6000}
	if node, _, err := s.place(ctx, sb); err != nil || node != "n2" {
		t.Fatalf("place with n2 free: %q, %v; want n2", node, err)
	}
	if _, err := s.placeOn(ctx, sb, "n2"); err != nil {
		t.Fatalf("placeOn n2: %v", err)
	}
	// A node whose heartbeats report nothing is judged by its committed sum.
	delete(beats.mem, "n1")
	delete(beats.mem, "n2")
	if _, err := s.placeOn(ctx, sb, "n1"); err != nil {
		t.Fatalf("placeOn n1 unreported: %v", err)
	}
}

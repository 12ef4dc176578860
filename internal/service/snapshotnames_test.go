package service

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// TestSnapshotNames: a tenant names its snapshots and finds them by name;
// the name moves with a second naming; another tenant neither sees the
// name nor can give it to its snapshot; malformed names and templates'
// names are refused.
func TestSnapshotNames(t *testing.T) {
	st, a, b := newTestStore(t)
	s := New(Config{}, st, nil, nil, time.Now(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := t.Context()
	if err := st.CreateTemplate(ctx, store.Template{Name: "base", Source: "builtin:base", State: store.TemplateReady}); err != nil {
		t.Fatal(err)
	}
	snap := func(tenant string) string {
		sn := store.Snapshot{ID: sandbox.NewSnapshotID(), SandboxID: sandbox.NewID(), Tenant: tenant, Kind: store.SnapshotDisk,
			Tier: TierManual, State: store.SnapshotReady, Runtime: "ns"}
		if err := st.CreateSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
		return sn.ID
	}
	one, two, theirs := snap(a), snap(a), snap(b)
	ca, cb := Caller{Tenant: a}, Caller{Tenant: b}
	if err := s.NameSnapshot(ctx, ca, one, "work"); err != nil {
		t.Fatalf("NameSnapshot: %v", err)
	}
	if got, err := s.SnapshotByName(ctx, ca, "work"); err != nil || got.ID != one {
		t.Fatalf("SnapshotByName = %s, %v; want %s", got.ID, err, one)
	}
	if _, err := s.SnapshotByName(ctx, cb, "work"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `no snapshot is named "work"`) {
		t.Errorf("SnapshotByName of another tenant = %v, want NotFound naming it", err)
	}
	if err := s.NameSnapshot(ctx, cb, one, "mine"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("NameSnapshot of another tenant's snapshot = %v, want NotFound", err)
	}
	if err := s.NameSnapshot(ctx, cb, theirs, "work"); err != nil {
		t.Errorf("the same name in another tenant: %v", err)
	}
	if err := s.NameSnapshot(ctx, ca, two, "work"); err != nil {
		t.Fatalf("NameSnapshot again: %v", err)
	}
	if got, err := s.SnapshotByName(ctx, ca, "work"); err != nil || got.ID != two {
		t.Fatalf("SnapshotByName after the move = %s, %v; want %s", got.ID, err, two)
	}
	names, err := s.SnapshotNames(ctx, ca)
	if err != nil || len(names) != 1 || len(names[two]) != 1 || names[two][0] != "work" {
		t.Fatalf("SnapshotNames = %v, %v; want work on %s only", names, err, two)
	}
	for _, tc := range []struct {
		name string
		want error
		msg  string
	}{
		{"base", errdefs.ErrConflict, "is a template's name"},
		{"Bad Name", errdefs.ErrInvalidArgument, "snapshot name"},
		{"", errdefs.ErrInvalidArgument, "snapshot name"},
		{one, errdefs.ErrInvalidArgument, "shape of a snapshot id"},
	} {
		if err := s.NameSnapshot(ctx, ca, one, tc.name); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("NameSnapshot(%q) = %v, want %v containing %q", tc.name, err, tc.want, tc.msg)
		}
	}
}

// TestSetIdle: the idle timeout of a sandbox that has one changes; one
// created without, or an out-of-range duration, is refused.
func TestSetIdle(t *testing.T) {
	st, a, _ := newTestStore(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// A reconciler that is not run: SetIdle only enqueues the sandbox.
	rec := reconcile.New(reconcile.Config{Workers: 1, NodeLostAfter: -1, SingleReplica: true}, st,
		func(string) (reconcile.NodeAPI, error) { return nil, errors.New("no node") }, log)
	s := New(Config{}, st, rec, nil, time.Now(), log)
	ctx := t.Context()
	idle := stored(t, st, a, sandbox.StateRunning)
	idle.IdleTimeout, idle.IdleAction = time.Minute, sandbox.IdlePauseHeld
	if err := st.UpdateSandbox(ctx, idle); err != nil {
		t.Fatal(err)
	}
	plain := stored(t, st, a, sandbox.StateRunning)
	c := Caller{Tenant: a}
	if _, err := s.SetIdle(ctx, c, plain.ID, time.Minute); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("SetIdle of a sandbox without idle handling = %v, want FailedPrecondition", err)
	}
	if _, err := s.SetIdle(ctx, c, idle.ID, 0); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("SetIdle 0 = %v, want InvalidArgument", err)
	}
	if _, err := s.SetIdle(ctx, c, idle.ID, 10*time.Minute); err != nil {
		t.Fatalf("SetIdle: %v", err)
	}
	got, err := st.GetSandboxByID(ctx, idle.ID)
	if err != nil || got.IdleTimeout != 10*time.Minute || got.IdleAction != sandbox.IdlePauseHeld || !got.ExpiresAt.IsZero() {
		t.Errorf("stored after SetIdle = %s %s (expires %s), %v; want 10m0s pause-held, no timeout", got.IdleTimeout, got.IdleAction, got.ExpiresAt, err)
	}
}

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
)

// TestRefusedLifecycleIsAnEvent: a refused pause (a stopped sandbox) is a
// "refused" event of the sandbox with the answer's code and message; a
// loop of them records refusalBurst events, not one each; another tenant's
// request records nothing.
func TestRefusedLifecycleIsAnEvent(t *testing.T) {
	st, a, b := newTestStore(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := reconcile.New(reconcile.Config{Workers: 1, NodeLostAfter: -1, SingleReplica: true}, st,
		func(string) (reconcile.NodeAPI, error) { return nil, errors.New("no node") }, log)
	s := New(Config{}, st, rec, nil, time.Now(), log)
	ctx := t.Context()
	sb := stored(t, st, a, sandbox.StateStopped)
	refusedEvents := func() []string {
		t.Helper()
		es, err := st.ListEvents(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			if e.Type == "refused" {
				out = append(out, e.Message)
			}
		}
		return out
	}
	_, err := s.Lifecycle(ctx, Caller{Tenant: a}, sb.ID, sandbox.OpPause)
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("pause of a stopped sandbox = %v, want Conflict", err)
	}
	got := refusedEvents()
	if want := "pause refused: conflict: " + err.Error(); len(got) != 1 || got[0] != want {
		t.Fatalf("refused events %q, want [%q]", got, want)
	}
	if _, err := s.Lifecycle(ctx, Caller{Tenant: b}, sb.ID, sandbox.OpPause); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("another tenant's pause = %v, want NotFound", err)
	}
	for range 50 {
		if _, err := s.Lifecycle(ctx, Caller{Tenant: a}, sb.ID, sandbox.OpResume); err == nil {
			t.Fatal("resume of a stopped sandbox succeeded")
		}
	}
	if got := refusedEvents(); len(got) != refusalBurst || !strings.HasPrefix(got[1], "resume refused: conflict: ") {
		t.Errorf("after 51 refusals in a loop: %d refused events %q, want %d (the burst)", len(got), got, refusalBurst)
	}
}

// TestRefusalBucket: a sandbox's bucket gives refusalBurst at once, then
// one per refusalEvery; sandboxes have their own.
func TestRefusalBucket(t *testing.T) {
	var r refusals
	now := time.Unix(1000, 0)
	for i := range refusalBurst {
		if !r.take("a", now) {
			t.Fatalf("take %d of the burst refused", i)
		}
	}
	if r.take("a", now) {
		t.Fatal("a take past the burst allowed")
	}
	if !r.take("b", now) {
		t.Fatal("another sandbox's first take refused")
	}
	if r.take("a", now.Add(refusalEvery-time.Second)) {
		t.Fatal("a take before refusalEvery allowed")
	}
	if !r.take("a", now.Add(refusalEvery)) || r.take("a", now.Add(refusalEvery)) {
		t.Fatal("want exactly one take after refusalEvery")
	}
}

// TestRefusalCapOverALife: past refusalMax refused events a sandbox records
// no more, and the last one recorded says so.
func TestRefusalCapOverALife(t *testing.T) {
	st, a, _ := newTestStore(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := New(Config{}, st, nil, nil, time.Now(), log)
	ctx := t.Context()
	sb := stored(t, st, a, sandbox.StateStopped)
	for range refusalMax + 20 {
		// A bucket each time: the life cap alone is under test.
		s.refusals = refusals{}
		s.refused(ctx, sb.ID, sandbox.OpPause, &sandbox.IllegalTransitionError{State: sandbox.StateStopped, Op: sandbox.OpPause})
	}
	es, err := st.ListEvents(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != refusalMax {
		t.Fatalf("%d events after %d refusals, want %d", len(es), refusalMax+20, refusalMax)
	}
	if last := es[len(es)-1].Message; !strings.Contains(last, "later ones are not") {
		t.Errorf("the last recorded refusal %q does not say later ones are not recorded", last)
	}
	s.refused(ctx, sb.ID, sandbox.OpPause, errdefs.ErrNotFound)
	if es2, _ := st.ListEvents(ctx, sb.ID); len(es2) != len(es) {
		t.Error("a NotFound recorded an event")
	}
}

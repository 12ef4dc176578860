package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
)

// presenceEvent is one call of HoldPresence's held.
type presenceEvent struct {
	present bool
	cause   error
}

// holder runs holdPresence for one replica until stop.
type holder struct {
	events chan presenceEvent
	stop   func()
}

func startHolding(t *testing.T, s *Store, replica string, ping time.Duration) *holder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &holder{events: make(chan presenceEvent, 100)}
	var wg sync.WaitGroup
	wg.Go(func() {
		err := holdPresence(ctx, presenceConfig(s.cfg), presenceKey(replica), ping, func(present bool, cause error) {
			h.events <- presenceEvent{present, cause}
		})
		if err != nil {
			t.Errorf("holdPresence(%s): %v", replica, err)
		}
	})
	var once sync.Once
	h.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(h.stop)
	return h
}

// next waits up to 10 s for h's next event.
func (h *holder) next(t *testing.T) presenceEvent {
	t.Helper()
	select {
	case e := <-h.events:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no presence event within 10s")
		return presenceEvent{}
	}
}

// wantPresent fails unless replica's presence, as s sees it, becomes want
// within 10 s.
func wantPresent(t *testing.T, s *Store, replica string, want bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := s.ReplicaPresent(t.Context(), replica)
		if err != nil {
			t.Fatalf("ReplicaPresent(%s): %v", replica, err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ReplicaPresent(%s) = %v after 10s, want %v", replica, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// presencePID returns the server process holding replica's presence lock.
func presencePID(t *testing.T, s *Store, replica string) int32 {
	t.Helper()
	key := uint64(presenceKey(replica))
	var pid int32
	err := s.queryRow(t.Context(), `SELECT pid FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 1
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND classid = $1::bigint::oid AND objid = $2::bigint::oid`, int64(key>>32), int64(key&0xffffffff)).Scan(&pid)
	if err != nil {
		t.Fatalf("find the presence lock of %s: %v", replica, err)
	}
	return pid
}

// TestPresenceFollowsTheSession: a replica is present while its session
// holds the lock, and absent once the session ends, seen from another
// replica's store; a session the server ends is replaced.
func TestPresenceFollowsTheSession(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	a, b := mustOpen(t, url), mustOpen(t, url)
	const replica = "host-1234-0123456789ab"
	wantPresent(t, b, replica, false)

	h := startHolding(t, a, replica, 50*time.Millisecond)
	if e := h.next(t); !e.present {
		t.Fatalf("first presence event = %+v, want present", e)
	}
	wantPresent(t, b, replica, true)
	wantPresent(t, b, "host-1234-ba9876543210", false)
	elsewhere := mustOpen(t, pgtest.Database(t))
	wantPresent(t, elsewhere, replica, false) // advisory locks are per database

	// The server ends the session (as when the replica's connection is cut):
	// the replica notices, and becomes present again on a new session.
	pid := presencePID(t, b, replica)
	var killed bool
	if err := b.queryRow(t.Context(), `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, killed, err)
	}
	if e := h.next(t); e.present || e.cause == nil {
		t.Fatalf("presence event after the session was terminated = %+v, want absent with a cause", e)
	}
	if e := h.next(t); !e.present {
		t.Fatalf("presence event after that = %+v, want present again", e)
	}
	if again := presencePID(t, b, replica); again == pid {
		t.Errorf("present on backend %d again, the one that was terminated", pid)
	}
	wantPresent(t, b, replica, true)

	// The replica's process ends its session (what its death does).
	h.stop()
	wantPresent(t, b, replica, false)
}

// TestPresenceHeldElsewhereWaits: while another session holds a replica's
// key (its previous session, not yet closed, or a colliding id) a second
// holder is refused without waiting in the server, and becomes present
// once the first lets go.
func TestPresenceHeldElsewhereWaits(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	a, b := mustOpen(t, url), mustOpen(t, url)
	const replica = "host-1-aaaaaaaaaaaa"
	first := startHolding(t, a, replica, 50*time.Millisecond)
	if e := first.next(t); !e.present {
		t.Fatalf("first holder: %+v, want present", e)
	}
	second := startHolding(t, b, replica, 50*time.Millisecond)
	if e := second.next(t); e.present || !errors.Is(e.cause, errdefs.ErrUnavailable) {
		t.Fatalf("second holder while the first holds: %+v, want absent, unavailable", e)
	}
	first.stop()
	for {
		e := second.next(t)
		if e.present {
			break
		}
		if !errors.Is(e.cause, errdefs.ErrUnavailable) {
			t.Fatalf("second holder: %+v, want unavailable until present", e)
		}
	}
	wantPresent(t, a, replica, true)
}

func TestPresenceKeysDiffer(t *testing.T) {
	seen := map[int64]string{}
	for _, id := range []string{"a", "b", "host-1-000000000000", "host-1-000000000001", "host-2-000000000000"} {
		k := presenceKey(id)
		if other, ok := seen[k]; ok {
			t.Errorf("replicas %s and %s share presence key %d", id, other, k)
		}
		seen[k] = id
	}
}

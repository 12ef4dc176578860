package keylock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLockSerialisesPerKey(t *testing.T) {
	var m Map
	var inside atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock := m.Lock("a")
			if inside.Add(1) != 1 {
				t.Error("two holders of one key")
			}
			time.Sleep(time.Microsecond)
			inside.Add(-1)
			unlock()
		}()
	}
	wg.Wait()
	if n := m.Len(); n != 0 {
		t.Errorf("%d lock entries left", n)
	}
}

func TestDifferentKeysDoNotWait(t *testing.T) {
	var m Map
	unlockA := m.Lock("a")
	defer unlockA()
	done := make(chan struct{})
	go func() {
		m.Lock("b")()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("locking b waited for a")
	}
}

func TestLockContextGivesUp(t *testing.T) {
	var m Map
	unlockA, err := m.LockContext(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	// The same key waits; a waiter whose context ends gives up.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := m.LockContext(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second lock of a held key: err %v, want %v", err, context.DeadlineExceeded)
	}
	got := make(chan struct{})
	go func() {
		unlock, err := m.LockContext(context.Background(), "a")
		if err == nil {
			unlock()
		}
		close(got)
	}()
	unlockA()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter did not get the lock after unlock")
	}
	if n := m.Len(); n != 0 {
		t.Errorf("entries left after every unlock: %d", n)
	}
}

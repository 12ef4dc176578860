package keylock

import (
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

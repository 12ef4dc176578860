package reconcile

import (
	"testing"
	"time"
)

func TestQueueDedupsAndNeverHandsOneKeyTwice(t *testing.T) {
	q := newQueue()
	q.add("a")
	q.add("a")
	q.add("b")
	k1, _ := q.get()
	k2, _ := q.get()
	if k1 != "a" || k2 != "b" {
		t.Fatalf("got %s, %s; want a, b", k1, k2)
	}
	// "a" is being processed: adding it again must wait for done.
	q.add("a")
	got := make(chan string, 1)
	go func() { k, _ := q.get(); got <- k }()
	select {
	case k := <-got:
		t.Fatalf("got %s while a is still processing", k)
	case <-time.After(50 * time.Millisecond):
	}
	q.done("a")
	select {
	case k := <-got:
		if k != "a" {
			t.Fatalf("got %s, want a", k)
		}
	case <-time.After(time.Second):
		t.Fatal("a not requeued after done")
	}
	q.close()
	if _, ok := q.get(); ok {
		t.Error("get after close returned a key")
	}
}

package route

import (
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/capability"
)

func rt(gen uint64, node string, expires time.Time) *Route {
	return &Route{
		Identity: capability.Identity{Sandbox: "sb1", Generation: gen, Node: node, Substrate: "vm", Activation: "a"},
		ExecID:   "sb1-g" + string(rune('0'+gen)) + "-x", Op: capability.OpExec, Token: node, Expires: expires,
	}
}

func TestGetPutExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &Cache{Margin: 5 * time.Second}
	if c.Get("sb1", capability.OpExec, now) != nil {
		t.Fatal("empty cache returned a route")
	}
	r7 := rt(7, "node-a", now.Add(time.Minute))
	c.Put(r7)
	if got := c.Get("sb1", capability.OpExec, now); got != r7 {
		t.Fatalf("Get = %+v, want r7", got)
	}
	if c.Get("sb1", capability.OpFiles, now) != nil {
		t.Error("a route for another operation was returned")
	}
	if c.Get("sb1", capability.OpExec, now.Add(56*time.Second)) != nil {
		t.Error("a route within the margin of its expiry was returned")
	}
	c.Forget("sb1")
	if c.Len() != 0 {
		t.Error("Forget left routes")
	}
}

// TestRepairKeepsExpiry: the repaired route replaces the rejected one and
// keeps its expiry: a repair is not a renewal.
func TestRepairKeepsExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &Cache{}
	r7 := rt(7, "node-a", now.Add(30*time.Second))
	c.Put(r7)
	fresh := rt(8, "node-b", now.Add(120*time.Second))
	got := c.Repair(r7, fresh, now)
	if got == nil || got.Identity.Generation != 8 || !got.Expires.Equal(r7.Expires) || !got.Repaired {
		t.Fatalf("Repair = %+v, want generation 8 with the rejected expiry", got)
	}
	if cur := c.Get("sb1", capability.OpExec, now); cur != got {
		t.Errorf("cache holds %+v, want the repaired route", cur)
	}
	// A fresh route that expires sooner keeps its own expiry.
	short := rt(9, "node-c", now.Add(10*time.Second))
	if got := c.Repair(got, short, now); !got.Expires.Equal(short.Expires) {
		t.Errorf("repair with an earlier expiry = %v, want %v", got.Expires, short.Expires)
	}
}

// TestLateRejectionDoesNotEvictNewer: a rejection of an old route that
// arrives after the entry was replaced leaves the newer entry in place and
// hands it back for the retry.
func TestLateRejectionDoesNotEvictNewer(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &Cache{}
	r7 := rt(7, "node-a", now.Add(time.Minute))
	c.Put(r7)
	r8 := rt(8, "node-b", now.Add(time.Minute))
	c.Put(r8) // a newer lookup installed generation 8
	stale := rt(7, "node-a", now.Add(2*time.Minute))
	got := c.Repair(r7, stale, now) // a late RefreshRoute on generation 7
	if got != r8 {
		t.Fatalf("late repair returned %+v, want the newer entry", got)
	}
	if cur := c.Get("sb1", capability.OpExec, now); cur != r8 {
		t.Errorf("late repair evicted the newer entry: %+v", cur)
	}
	// Without a fresh route the rejected entry goes, but only if current.
	c.Repair(r7, nil, now)
	if c.Get("sb1", capability.OpExec, now) != r8 {
		t.Error("a nil repair of an old route removed the newer entry")
	}
	c.Repair(r8, nil, now)
	if c.Get("sb1", capability.OpExec, now) != nil {
		t.Error("a nil repair of the current route kept it")
	}
}

// TestConcurrentRepairs: many requests rejected on one route repair it
// concurrently; exactly one replacement is installed and every caller gets
// a route of the new generation.
func TestConcurrentRepairs(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &Cache{}
	r7 := rt(7, "node-a", now.Add(time.Minute))
	c.Put(r7)
	var wg sync.WaitGroup
	results := make([]*Route, 64)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.Repair(r7, rt(8, "node-b", now.Add(2*time.Minute)), now)
		}()
	}
	wg.Wait()
	cur := c.Get("sb1", capability.OpExec, now)
	for i, r := range results {
		if r != cur {
			t.Fatalf("caller %d got %p, the cache holds %p: more than one replacement was installed", i, r, cur)
		}
	}
	if cur.Identity.Generation != 8 {
		t.Errorf("cache holds generation %d", cur.Identity.Generation)
	}
}

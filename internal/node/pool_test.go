package node

import (
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
)

func poolManager() *Manager {
	m := &Manager{starting: map[string]bool{}}
	m.pool.init()
	return m
}

var keyNS = nodev1.PoolKey{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}

// TestPoolTakeHandsOutOnce: a prepared execution goes to one create only,
// oldest first, and hits and misses are counted per key.
func TestPoolTakeHandsOutOnce(t *testing.T) {
	m := poolManager()
	a, b := &pooled{rec: &Record{}}, &pooled{rec: &Record{}}
	m.pool.ready[keyNS] = []*pooled{a, b}
	if got := m.pool.take(keyNS); got != a {
		t.Fatalf("first take = %p, want the oldest %p", got, a)
	}
	if got := m.pool.take(keyNS); got != b {
		t.Fatalf("second take = %p, want %p", got, b)
	}
	if got := m.pool.take(keyNS); got != nil {
		t.Fatalf("third take = %p, want none: an entry is handed out once", got)
	}
	other := keyNS
	other.MemoryMiB = 512
	m.pool.ready[keyNS] = []*pooled{{rec: &Record{}}}
	if got := m.pool.take(other); got != nil {
		t.Fatalf("a 512 MiB create took a 256 MiB entry")
	}
	if m.pool.hits[keyNS] != 2 || m.pool.misses[keyNS] != 1 || m.pool.misses[other] != 1 {
		t.Errorf("hits %v misses %v", m.pool.hits, m.pool.misses)
	}
}

// TestPoolNextToFill: the key most short of its target is filled first;
// nothing is filled while a create starts, nor right after one unless a
// pool runs low, nor past a failure's backoff, nor beyond memory.
func TestPoolNextToFill(t *testing.T) {
	m := poolManager()
	small := keyNS
	small.Template = "base"
	m.SetPoolTargets([]nodev1.PoolTarget{{PoolKey: keyNS, Size: 4, Version: "1"}, {PoolKey: small, Size: 1, Version: "1"}})
	m.pool.ready[keyNS] = []*pooled{{rec: &Record{}}, {rec: &Record{}}} // 2 short
	key, _, ok := m.nextToFill()
	if !ok || key != keyNS {
		t.Fatalf("nextToFill = %v %v, want %v (2 short beats 1 short)", key, ok, keyNS)
	}
	if m.pool.filling[keyNS] != 1 {
		t.Fatalf("filling = %d, want 1", m.pool.filling[keyNS])
	}
	// A create is starting: creates first.
	m.starting["x"] = true
	if _, _, ok := m.nextToFill(); ok {
		t.Fatal("filled while a create was starting")
	}
	delete(m.starting, "x")
	// Right after a create: quiet unless low. keyNS has 2 ready + 1
	// filling of 4 (not low); base has 0 of 1 (low).
	m.lastStart = time.Now()
	key, _, ok = m.nextToFill()
	if !ok || key != small {
		t.Fatalf("right after a create: nextToFill = %v %v, want only the low pool %v", key, ok, small)
	}
	if _, _, ok := m.nextToFill(); ok {
		t.Fatal("right after a create, a pool that is not low was filled")
	}
	m.lastStart = time.Time{}
	// A failed key waits for its backoff.
	m.pool.filling = map[nodev1.PoolKey]int{}
	m.pool.retryAt[keyNS] = time.Now().Add(time.Minute)
	m.pool.retryAt[small] = time.Now().Add(time.Minute)
	if _, _, ok := m.nextToFill(); ok {
		t.Fatal("filled during a failure's backoff")
	}
	// Memory: a node whose capacity is used takes no more.
	m.pool.retryAt = map[nodev1.PoolKey]time.Time{}
	m.cfg.MemoryMiB = 100
	m.records = records{dir: t.TempDir()}
	if _, _, ok := m.nextToFill(); ok {
		t.Fatal("filled a 256 MiB entry on a node with 100 MiB")
	}
}

// TestPoolTargetsIgnoreMalformed: targets with a bad template name, no
// runtime or no size are not kept.
func TestPoolTargetsIgnoreMalformed(t *testing.T) {
	m := poolManager()
	bad := []nodev1.PoolTarget{
		{PoolKey: nodev1.PoolKey{Template: "../etc", Runtime: "ns", MemoryMiB: 256}, Size: 1},
		{PoolKey: nodev1.PoolKey{Template: "minimal", MemoryMiB: 256}, Size: 1},
		{PoolKey: keyNS, Size: 0},
	}
	m.SetPoolTargets(bad)
	if len(m.pool.targets) != 0 {
		t.Errorf("targets kept: %v", m.pool.targets)
	}
}

func TestValidSandboxExecIDRefusesPoolIDs(t *testing.T) {
	if err := validSandboxExecID("pool-abc"); err == nil {
		t.Error("a pool id was accepted from a caller")
	}
	if err := validSandboxExecID("abcdefghijklmnopqrst-g1-abcdefgh"); err != nil {
		t.Errorf("a sandbox exec id was refused: %v", err)
	}
}

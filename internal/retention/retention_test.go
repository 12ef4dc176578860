package retention

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestParsePolicy(t *testing.T) {
	good := []struct {
		in   string
		want Policy
	}{
		{"10m:1h,1h:24h,24h:168h", Policy{Tiers: []Tier{{10 * time.Minute, time.Hour}, {time.Hour, 24 * time.Hour}, {24 * time.Hour, 168 * time.Hour}}}},
		{" 5m:30m , 1d:7d , max=10 ", Policy{Tiers: []Tier{{5 * time.Minute, 30 * time.Minute}, {24 * time.Hour, 7 * 24 * time.Hour}}, MaxCount: 10}},
		{"1h:1h", Policy{Tiers: []Tier{{time.Hour, time.Hour}}}},
	}
	for _, tt := range good {
		got, err := ParsePolicy(tt.in)
		if err != nil {
			t.Errorf("ParsePolicy(%q): %v", tt.in, err)
			continue
		}
		if !slices.Equal(got.Tiers, tt.want.Tiers) || got.MaxCount != tt.want.MaxCount {
			t.Errorf("ParsePolicy(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
	bad := []string{"", "10m", "10m:", ":1h", "1h:10m", "0s:1h", "-1m:1h", "1h:24h,10m:1h", "10m:1h,5m:2h",
		"10m:1h,max=-1", "10m:1h,max=x", "max=5", "10m:1h,max=1,max=2", "1x:1h", "1d:99999d", "10m:1h,,1h:2h", "0d:1d"}
	for _, in := range bad {
		if p, err := ParsePolicy(in); err == nil {
			t.Errorf("ParsePolicy(%q) = %+v, want an error", in, p)
		}
	}
	if d := DefaultPolicy(); len(d.Tiers) != 3 || d.MaxCount != 64 {
		t.Errorf("DefaultPolicy() = %+v", d)
	}
}

func TestKeepExample(t *testing.T) {
	p, _ := ParsePolicy("10m:1h,1h:24h")
	now := t0
	var snaps []Snapshot
	// Disk snapshots every 5 minutes for 30 hours.
	for i := 0; i < 30*12; i++ {
		snaps = append(snaps, Snapshot{ID: fmt.Sprintf("d%03d", i), Kind: KindDisk, CreatedAt: now.Add(-time.Duration(i) * 5 * time.Minute)})
	}
	snaps = append(snaps, Snapshot{ID: "full-old", Kind: KindFull, CreatedAt: now.Add(-100 * time.Hour), Pinned: true})
	keep, prune := Keep(now, snaps, p)
	// 10-minute buckets over the last hour: 6 or 7; hourly for 24 h: 24 or
	// 25, overlapping the first hour; plus the pinned full snapshot.
	if len(keep) < 28 || len(keep) > 33 {
		t.Errorf("kept %d snapshots: %v", len(keep), keep)
	}
	if keep[0] != "d000" || !slices.Contains(keep, "full-old") {
		t.Errorf("keep = %v: want d000 first and full-old", keep)
	}
	if len(keep)+len(prune) != len(snaps) {
		t.Errorf("keep %d + prune %d != %d", len(keep), len(prune), len(snaps))
	}
}

// randomHistory makes n snapshots of both kinds at random times in the last
// ten days (a few in the future), some pinned, some at the same instant.
func randomHistory(r *rand.Rand, now time.Time, n int) []Snapshot {
	snaps := make([]Snapshot, n)
	for i := range snaps {
		age := time.Duration(r.Int64N(int64(240 * time.Hour)))
		if r.IntN(50) == 0 {
			age = -time.Duration(r.Int64N(int64(time.Hour)))
		}
		if i > 0 && r.IntN(20) == 0 {
			age = now.Sub(snaps[i-1].CreatedAt)
		}
		kind := KindDisk
		if r.IntN(4) == 0 {
			kind = KindFull
		}
		snaps[i] = Snapshot{ID: fmt.Sprintf("s%04d", i), Kind: kind, CreatedAt: now.Add(-age), Pinned: r.IntN(25) == 0}
	}
	return snaps
}

func randomPolicy(r *rand.Rand) Policy {
	if r.IntN(3) == 0 {
		return DefaultPolicy()
	}
	var p Policy
	every, forD := time.Duration(r.IntN(30)+1)*time.Minute, time.Duration(0)
	for range r.IntN(4) + 1 {
		forD = max(forD+time.Minute, every*time.Duration(r.IntN(20)+1))
		p.Tiers = append(p.Tiers, Tier{Every: every, For: forD})
		every *= time.Duration(r.IntN(6) + 1)
		if every > forD*2 {
			every = forD
		}
	}
	if r.IntN(2) == 0 {
		p.MaxCount = r.IntN(40) + 1
	}
	if p.Validate() != nil {
		return DefaultPolicy()
	}
	return p
}

func TestKeepProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 1))
	for iter := 0; iter < 500; iter++ {
		now := t0.Add(time.Duration(r.Int64N(int64(1000 * time.Hour))))
		snaps := randomHistory(r, now, r.IntN(300))
		p := randomPolicy(r)
		keep, prune := Keep(now, snaps, p)
		name := fmt.Sprintf("iteration %d, policy %s, %d snapshots", iter, p, len(snaps))
		checkKeep(t, name, now, snaps, p, keep, prune)
		// Deterministic, whatever the input order.
		shuffled := slices.Clone(snaps)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		k2, p2 := Keep(now, shuffled, p)
		if !slices.Equal(keep, k2) || !slices.Equal(prune, p2) {
			t.Fatalf("%s: Keep depends on the input order", name)
		}
		// Idempotent.
		var kept []Snapshot
		for _, s := range snaps {
			if slices.Contains(keep, s.ID) {
				kept = append(kept, s)
			}
		}
		k3, p3 := Keep(now, kept, p)
		if len(p3) != 0 || !slices.Equal(k3, keep) {
			t.Fatalf("%s: Keep of the kept set prunes %v more", name, p3)
		}
	}
}

func checkKeep(t *testing.T, name string, now time.Time, snaps []Snapshot, p Policy, keep, prune []string) {
	t.Helper()
	byID := map[string]Snapshot{}
	for _, s := range snaps {
		byID[s.ID] = s
	}
	kept := map[string]bool{}
	for _, id := range keep {
		if _, ok := byID[id]; !ok {
			t.Fatalf("%s: kept %q, not an input", name, id)
		}
		kept[id] = true
	}
	for _, id := range prune {
		if kept[id] {
			t.Fatalf("%s: %q both kept and pruned", name, id)
		}
	}
	if len(keep)+len(prune) != len(snaps) {
		t.Fatalf("%s: %d kept + %d pruned, %d inputs", name, len(keep), len(prune), len(snaps))
	}
	newest := map[Kind]Snapshot{}
	must := 0
	for _, s := range snaps {
		if n, ok := newest[s.Kind]; !ok || s.CreatedAt.After(n.CreatedAt) || (s.CreatedAt.Equal(n.CreatedAt) && s.ID < n.ID) {
			newest[s.Kind] = s
		}
		if s.Pinned && !kept[s.ID] {
			t.Fatalf("%s: pinned %q pruned", name, s.ID)
		}
	}
	for _, s := range snaps {
		if s.Pinned || newest[s.Kind].ID == s.ID {
			must++
		}
	}
	for kind, s := range newest {
		if !kept[s.ID] {
			t.Fatalf("%s: the newest %s snapshot %q pruned", name, kind, s.ID)
		}
	}
	if p.MaxCount > 0 && len(keep) > max(p.MaxCount, must) {
		t.Fatalf("%s: kept %d, cap %d (%d must be kept)", name, len(keep), p.MaxCount, must)
	}
	// Without a cap, every bucket's newest is kept.
	if p.MaxCount == 0 {
		for _, tier := range p.Tiers {
			best := map[bucketKey]Snapshot{}
			for _, s := range snaps {
				if now.Sub(s.CreatedAt) >= tier.For {
					continue
				}
				k := bucketKey{s.Kind, floorDiv(s.CreatedAt.UnixNano(), int64(tier.Every))}
				if b, ok := best[k]; !ok || newestFirst(s, b) < 0 {
					best[k] = s
				}
			}
			for _, s := range best {
				if !kept[s.ID] {
					t.Fatalf("%s: tier %s: %q, newest of its bucket, pruned", name, tier, s.ID)
				}
			}
		}
	}
	// Everything kept has a reason.
	for _, id := range keep {
		s := byID[id]
		if s.Pinned || newest[s.Kind].ID == id {
			continue
		}
		reason := false
		for _, tier := range p.Tiers {
			if now.Sub(s.CreatedAt) < tier.For {
				reason = true
			}
		}
		if !reason {
			t.Fatalf("%s: %q kept, older than every tier", name, id)
		}
	}
}

func TestKeepInvalidPolicyPrunesNothing(t *testing.T) {
	snaps := randomHistory(rand.New(rand.NewPCG(1, 1)), t0, 50)
	keep, prune := Keep(t0, snaps, Policy{})
	if len(prune) != 0 || len(keep) != 50 {
		t.Errorf("invalid policy: kept %d, pruned %d; want all kept", len(keep), len(prune))
	}
}

func TestDueAndNext(t *testing.T) {
	tests := []struct {
		name     string
		last     time.Time
		every    time.Duration
		due      bool
		wantNext time.Time
	}{
		{"never ran", time.Time{}, time.Minute, true, t0},
		{"disabled", t0.Add(-time.Hour), 0, false, time.Time{}},
		{"not yet", t0.Add(-30 * time.Second), time.Minute, false, t0.Add(30 * time.Second)},
		{"exactly due", t0.Add(-time.Minute), time.Minute, true, t0},
		{"overdue", t0.Add(-time.Hour), time.Minute, true, t0},
		{"last in the future", t0.Add(time.Hour), time.Minute, false, t0.Add(time.Hour + time.Minute)},
	}
	for _, tt := range tests {
		if got := Due(t0, tt.last, tt.every); got != tt.due {
			t.Errorf("%s: Due = %v, want %v", tt.name, got, tt.due)
		}
		if got := Next(t0, tt.last, tt.every); !got.Equal(tt.wantNext) {
			t.Errorf("%s: Next = %v, want %v", tt.name, got, tt.wantNext)
		}
	}
}

func TestSchedule(t *testing.T) {
	s := Schedule{DiskEvery: 5 * time.Minute, FullEvery: time.Hour}
	tests := []struct {
		name               string
		lastDisk, lastFull time.Time
		kind               Kind
		due                bool
		nextKind           Kind
		next               time.Time
	}{
		{"nothing yet", time.Time{}, time.Time{}, KindFull, true, KindFull, t0},
		{"disk due", t0.Add(-6 * time.Minute), t0.Add(-30 * time.Minute), KindDisk, true, KindDisk, t0},
		{"full counts as disk", t0.Add(-6 * time.Minute), t0.Add(-2 * time.Minute), "", false, KindDisk, t0.Add(3 * time.Minute)},
		{"full due", t0.Add(-time.Minute), t0.Add(-61 * time.Minute), KindFull, true, KindFull, t0},
		{"next full before next disk", t0.Add(-time.Minute), t0.Add(-59*time.Minute - 30*time.Second), "", false, KindFull, t0.Add(30 * time.Second)},
	}
	for _, tt := range tests {
		kind, due := s.Due(t0, tt.lastDisk, tt.lastFull)
		if kind != tt.kind || due != tt.due {
			t.Errorf("%s: Due = %q %v, want %q %v", tt.name, kind, due, tt.kind, tt.due)
		}
		nk, at, ok := s.Next(t0, tt.lastDisk, tt.lastFull)
		if !ok || nk != tt.nextKind || !at.Equal(tt.next) {
			t.Errorf("%s: Next = %q %v %v, want %q %v", tt.name, nk, at, ok, tt.nextKind, tt.next)
		}
	}
	if _, _, ok := (Schedule{}).Next(t0, time.Time{}, time.Time{}); ok {
		t.Error("a disabled schedule has a next run")
	}
	if k, at, _ := (Schedule{DiskEvery: time.Minute}).Next(t0, t0, time.Time{}); k != KindDisk || !at.Equal(t0.Add(time.Minute)) {
		t.Errorf("disk only: Next = %q %v", k, at)
	}
}

// FuzzParsePolicy checks that ParsePolicy never panics, that what it accepts
// is valid, and that String round-trips.
func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{DefaultPolicyString, "10m:1h", "1d:7d,max=3", "1h:24h,10m:1h", "max=1", "", ":", "9223372036854775807ns:1h", "1e9h:1h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy(s)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("ParsePolicy(%q) accepted an invalid policy: %v", s, err)
		}
		q, err := ParsePolicy(p.String())
		if err != nil || !slices.Equal(p.Tiers, q.Tiers) || p.MaxCount != q.MaxCount {
			t.Fatalf("ParsePolicy(%q).String() = %q does not round-trip: %+v %v", s, p.String(), q, err)
		}
		Keep(t0, randomHistory(rand.New(rand.NewPCG(1, 2)), t0, 20), p)
	})
}

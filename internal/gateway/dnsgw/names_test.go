package dnsgw

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestNameTableRecordAndExpire(t *testing.T) {
	clk := newFakeClock()
	nt := NewNameTable(10, clk.now)
	a4 := netip.MustParseAddr("198.51.100.1")
	a6 := netip.MustParseAddr("2001:db8::1")
	nt.Record("API.Example.COM.", []netip.Addr{a4, netip.MustParseAddr("::ffff:198.51.100.2"), a6}, time.Minute)
	nt.Record("www.example.com", []netip.Addr{a4}, 2*time.Minute)

	tests := []struct {
		addr netip.Addr
		want []string
	}{
		{a4, []string{"api.example.com", "www.example.com"}},
		{netip.MustParseAddr("::ffff:198.51.100.1"), []string{"api.example.com", "www.example.com"}},
		{netip.MustParseAddr("198.51.100.2"), []string{"api.example.com"}},
		{a6, []string{"api.example.com"}},
		{netip.MustParseAddr("fe80::1%eth0"), nil},
		{netip.MustParseAddr("198.51.100.3"), nil},
		{netip.Addr{}, nil},
	}
	for _, tt := range tests {
		if got := nt.Domains(tt.addr); !slices.Equal(got, tt.want) {
			t.Errorf("Domains(%s) = %q, want %q", tt.addr, got, tt.want)
		}
	}

	clk.advance(time.Minute) // api.example.com expires exactly now
	if got := nt.Domains(a4); !slices.Equal(got, []string{"www.example.com"}) {
		t.Errorf("after 1m: Domains(a4) = %q, want [www.example.com]", got)
	}
	if got := nt.Domains(a6); got != nil {
		t.Errorf("after 1m: Domains(a6) = %q, want nil", got)
	}
	// Refreshing a name extends it.
	nt.Record("www.example.com.", []netip.Addr{a4}, 5*time.Minute)
	clk.advance(4 * time.Minute)
	if got := nt.Domains(a4); !slices.Equal(got, []string{"www.example.com"}) {
		t.Errorf("after refresh: Domains(a4) = %q", got)
	}
	clk.advance(time.Minute)
	if got := nt.Domains(a4); got != nil {
		t.Errorf("after the refreshed TTL: Domains(a4) = %q, want nil", got)
	}
}

func TestNameTableIgnoresBadInput(t *testing.T) {
	clk := newFakeClock()
	nt := NewNameTable(10, clk.now)
	a := netip.MustParseAddr("198.51.100.1")
	nt.Record("", []netip.Addr{a}, time.Minute)
	nt.Record(".", []netip.Addr{a}, time.Minute)
	nt.Record("example.com", []netip.Addr{a}, 0)
	nt.Record("example.com", []netip.Addr{a}, -time.Second)
	nt.Record(fmt.Sprintf("%0254d.com", 0), []netip.Addr{a}, time.Minute)
	nt.Record("example.com", []netip.Addr{{}}, time.Minute)
	nt.Record("example.com", nil, time.Minute)
	if n := nt.Len(); n != 0 {
		t.Fatalf("Len = %d after bad records, want 0", n)
	}
}

func TestNameTableBounds(t *testing.T) {
	clk := newFakeClock()
	nt := NewNameTable(3, clk.now)
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}) }
	for i := 1; i <= 5; i++ {
		nt.Record(fmt.Sprintf("h%d.example.com", i), []netip.Addr{addr(i)}, time.Hour)
		clk.advance(time.Second)
	}
	if n := nt.Len(); n != 3 {
		t.Fatalf("Len = %d, want the bound 3", n)
	}
	for i := 1; i <= 5; i++ {
		got := nt.Domains(addr(i))
		if want := i > 2; (got != nil) != want {
			t.Errorf("address %d: Domains = %q, want kept=%v (oldest evicted)", i, got, want)
		}
	}
	// Recording an address again makes it the newest.
	nt.Record("again.example.com", []netip.Addr{addr(3)}, time.Hour)
	nt.Record("h6.example.com", []netip.Addr{addr(6)}, time.Hour)
	if nt.Domains(addr(4)) != nil || nt.Domains(addr(3)) == nil {
		t.Errorf("want 4 evicted and 3 kept after 3 was recorded again")
	}

	// Names per address.
	nt = NewNameTable(3, clk.now)
	a := addr(1)
	for i := range MaxNamesPerAddr + 4 {
		// Names recorded later expire later, except n0 which lives longest.
		ttl := time.Hour + time.Duration(i)*time.Minute
		if i == 0 {
			ttl = 10 * time.Hour
		}
		nt.Record(fmt.Sprintf("n%d.example.com", i), []netip.Addr{a}, ttl)
	}
	got := nt.Domains(a)
	if len(got) != MaxNamesPerAddr {
		t.Fatalf("%d names for one address, want the bound %d", len(got), MaxNamesPerAddr)
	}
	// The ones expiring first (n1..n4) made room.
	for _, gone := range []string{"n1.example.com", "n2.example.com", "n3.example.com", "n4.example.com"} {
		if slices.Contains(got, gone) {
			t.Errorf("%s kept, want it evicted as expiring first; got %q", gone, got)
		}
	}
	if !slices.Contains(got, "n0.example.com") {
		t.Errorf("n0 (longest TTL) evicted; got %q", got)
	}
}

func TestNameTableForgetsExpired(t *testing.T) {
	clk := newFakeClock()
	nt := NewNameTable(100, clk.now)
	for i := range 50 {
		nt.Record("old.example.com", []netip.Addr{netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})}, time.Minute)
	}
	clk.advance(time.Hour)
	nt.Record("new.example.com", []netip.Addr{netip.MustParseAddr("203.0.113.1")}, time.Minute)
	if n := nt.Len(); n != 1 {
		t.Fatalf("Len = %d after the old entries expired, want 1", n)
	}
}

// TestNameTableConcurrent exercises the lock; run with -race.
func TestNameTableConcurrent(t *testing.T) {
	nt := NewNameTable(64, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				a := netip.AddrFrom4([4]byte{198, 51, byte(g), byte(i)})
				nt.Record(fmt.Sprintf("h%d.example.com", i%20), []netip.Addr{a}, time.Minute)
				nt.Domains(a)
			}
		}()
	}
	wg.Wait()
	if n := nt.Len(); n > 64 {
		t.Fatalf("Len = %d, more than the bound 64", n)
	}
}

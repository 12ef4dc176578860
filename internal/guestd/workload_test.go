package guestd

import "testing"

func TestWorkloadMemoryMax(t *testing.T) {
	for _, tc := range []struct{ total, want uint64 }{
		{100 << 20, 68 << 20}, // a 128 MiB VM: the 32 MiB reserve
		{1 << 30, 896 << 20},  // 1 GiB: an eighth
		{8 << 30, 7 << 30},    // 8 GiB: an eighth
		{48 << 20, 24 << 20},  // too small for the reserve: half
		{64 << 20, 32 << 20},  // exactly twice the reserve
		{0, 0},
	} {
		if got := workloadMemoryMax(tc.total); got != tc.want {
			t.Errorf("workloadMemoryMax(%d MiB) = %d MiB, want %d MiB", tc.total>>20, got>>20, tc.want>>20)
		}
	}
}

func TestMemTotal(t *testing.T) {
	got, err := memTotal([]byte("MemFree:          1000 kB\nMemTotal:        102400 kB\n"))
	if err != nil || got != 100<<20 {
		t.Errorf("memTotal = %d, %v; want %d", got, err, 100<<20)
	}
	for _, bad := range []string{"", "MemTotal: 12\n", "MemTotal: x kB\n", "MemTotal: 0 kB\n", "MemTotal: 99999999999999999 kB\n", "MemTotal: 10 MB\n"} {
		if n, err := memTotal([]byte(bad)); err == nil {
			t.Errorf("memTotal(%q) = %d, want an error", bad, n)
		}
	}
}

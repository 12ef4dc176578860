package ns

import (
	"slices"
	"strings"
	"testing"
)

func TestShiftID(t *testing.T) {
	const base = 1_000_000
	tests := []struct {
		in, want uint32
		ok       bool
	}{
		{0, base, true},
		{1000, base + 1000, true},
		{RangeSize - 1, base + RangeSize - 1, true},
		{base + 5, base + 5, true}, // already shifted
		{RangeSize, 0, false},
		{base + RangeSize, 0, false}, // another range
	}
	for _, tt := range tests {
		got, err := shiftID(tt.in, base)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("shiftID(%d) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestEnvList(t *testing.T) {
	got := envList(map[string]string{"B": "2", "A": "1"})
	want := []string{"A=1", "B=2", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if !slices.Equal(got, want) {
		t.Errorf("envList = %v, want %v", got, want)
	}
	if got := envList(map[string]string{"PATH": "/x"}); !slices.Equal(got, []string{"PATH=/x"}) {
		t.Errorf("envList keeps the caller's PATH: got %v", got)
	}
}

func TestSanitize(t *testing.T) {
	if got := sanitize([]byte("a\x1b[31mb\nc")); got != "a?[31mb\nc" {
		t.Errorf("sanitize = %q", got)
	}
	if got := sanitize([]byte(strings.Repeat("x", 5000))); len(got) != 2048 {
		t.Errorf("sanitize keeps %d bytes, want 2048", len(got))
	}
}

func TestSlots(t *testing.T) {
	d := &Driver{cfg: Config{StateDir: t.TempDir(), UIDBase: 1_000_000, Slots: 2}}
	if err := mkdirs(d); err != nil {
		t.Fatal(err)
	}
	a, err := d.allocSlot("sb-a")
	if err != nil || a != 0 {
		t.Fatalf("allocSlot(a) = %d, %v", a, err)
	}
	if again, _ := d.allocSlot("sb-a"); again != a {
		t.Errorf("a sandbox's second execution got slot %d, want its slot %d", again, a)
	}
	if b, err := d.allocSlot("sb-b"); err != nil || b != 1 {
		t.Fatalf("allocSlot(b) = %d, %v", b, err)
	}
	if _, err := d.allocSlot("sb-c"); err == nil {
		t.Fatal("allocSlot with every slot taken: want ResourceExhausted")
	}
	if err := d.releaseSlot("sb-a", 1_000_000); err != nil {
		t.Fatal(err)
	}
	if c, err := d.allocSlot("sb-c"); err != nil || c != 0 {
		t.Errorf("allocSlot after release = %d, %v; want 0", c, err)
	}
}

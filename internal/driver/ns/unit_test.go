package ns

import (
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/cgroup"
	"github.com/spacesandbox/space/internal/errdefs"
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

// slotDriver is a driver with only what slot allocation uses, on its own
// state directory and the host registry registry.
func slotDriver(t *testing.T, registry string, slots int) *Driver {
	t.Helper()
	state := t.TempDir()
	d := &Driver{cfg: Config{StateDir: state, UIDBase: 1_000_000, Slots: slots}, log: slog.New(slog.DiscardHandler),
		ranges: hostRanges{dir: registry, stateDir: state}}
	if err := mkdirs(d); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSlots(t *testing.T) {
	d := slotDriver(t, t.TempDir(), 2)
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

// TestSlotsAreHostWide: two drivers of one host (two data directories)
// never give the same host uid range to two sandboxes.
func TestSlotsAreHostWide(t *testing.T) {
	registry := t.TempDir()
	d1, d2 := slotDriver(t, registry, 4), slotDriver(t, registry, 4)
	a, err := d1.allocSlot("sb-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := d2.allocSlot("sb-b")
	if err != nil {
		t.Fatal(err)
	}
	if d1.rangeBase(a) == d2.rangeBase(b) {
		t.Fatalf("two drivers of one host gave host uid range %d to two sandboxes", d1.rangeBase(a))
	}
	// The same sandbox keeps its range; a release frees it on the host.
	if again, err := d1.allocSlot("sb-a"); err != nil || again != a {
		t.Fatalf("sb-a again: slot %d, %v; want %d", again, err, a)
	}
	if err := d1.releaseSlot("sb-a", d1.rangeBase(a)); err != nil {
		t.Fatal(err)
	}
	if c, err := d2.allocSlot("sb-c"); err != nil || d2.rangeBase(c) != d1.rangeBase(a) {
		t.Fatalf("after the release: slot %d, %v; want the released range %d", c, err, d1.rangeBase(a))
	}
	// A driver whose ranges the others hold all is full, and says so.
	d3 := slotDriver(t, registry, 2)
	if n, err := d3.allocSlot("sb-d"); !errors.Is(err, errdefs.ErrNoCapacity) {
		t.Fatalf("every range held on the host: slot %d, %v; want no capacity", n, err)
	}
}

// TestStaleHostClaimIsTakenOver: a claim whose owner is gone (its state
// directory removed, as a test's or a wiped node's) does not hold its range.
func TestStaleHostClaimIsTakenOver(t *testing.T) {
	registry := t.TempDir()
	gone := slotDriver(t, registry, 1)
	if _, err := gone.allocSlot("sb-gone"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(gone.cfg.StateDir); err != nil {
		t.Fatal(err)
	}
	d := slotDriver(t, registry, 1)
	if n, err := d.allocSlot("sb-new"); err != nil || n != 0 {
		t.Fatalf("a range whose claimer is gone: slot %d, %v; want 0", n, err)
	}
	c, ok, err := d.ranges.owner(d.rangeBase(0))
	if err != nil || !ok || c.sandboxID != "sb-new" || c.stateDir != d.ranges.stateDir || c.slot != 0 {
		t.Fatalf("the claim after the takeover: %+v %v %v", c, ok, err)
	}
	// A claim that cannot be judged is kept.
	if err := os.WriteFile(d.ranges.claimPath(d.rangeBase(0)), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := slotDriver(t, registry, 1)
	if n, err := other.allocSlot("sb-other"); err == nil {
		t.Fatalf("a garbled claim was taken over: slot %d", n)
	}
}

// TestExistingSlotsAreClaimedOnTheHost: a driver's slots from before the
// registry (or a cleared /run) are claimed when it starts.
func TestExistingSlotsAreClaimedOnTheHost(t *testing.T) {
	registry := t.TempDir()
	d := slotDriver(t, registry, 2)
	if err := os.WriteFile(d.slotPath(0), []byte("sb-old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.claimSlotsOnTheHost(); err != nil {
		t.Fatal(err)
	}
	other := slotDriver(t, registry, 2)
	if n, err := other.allocSlot("sb-x"); err != nil || n != 1 {
		t.Fatalf("another driver after the claim: slot %d, %v; want 1", n, err)
	}
}

func TestHostRegistryMustBeRootsAlone(t *testing.T) {
	registry := t.TempDir()
	if err := os.Chmod(registry, 0o777); err != nil {
		t.Fatal(err)
	}
	d := slotDriver(t, registry, 1)
	if _, err := d.allocSlot("sb"); err == nil || !strings.Contains(err.Error(), "only root writes") {
		t.Fatalf("a world-writable registry: %v, want a refusal", err)
	}
}

// TestGroupOfOlderExecution: an execution whose state predates OwnCPU (an
// older node-manager started it) keeps its cpu group below CgroupParent, so
// that a new node-manager stops and removes the group it is in.
func TestGroupOfOlderExecution(t *testing.T) {
	d := &Driver{hier: &cgroup.Hierarchy{Mode: cgroup.V1, V1: map[string]string{"cpu": "/c/cpu", "pids": "/c/pids"}}}
	for _, tc := range []struct {
		own  bool
		want []string
	}{
		{false, []string{"/c/cpu/space/e-1", "/c/pids/space/e-1"}},
		{true, []string{"/c/cpu/space.e-1", "/c/pids/space/e-1"}},
	} {
		g, err := d.group(&state{ExecID: "e-1", CgroupParent: "space", OwnCPU: tc.own})
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Dirs(); !slices.Equal(got, tc.want) {
			t.Errorf("OwnCPU=%v: Dirs() = %q, want %q", tc.own, got, tc.want)
		}
	}
}

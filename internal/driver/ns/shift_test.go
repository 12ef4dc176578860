package ns

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/testenv/swaprace"
)

func lstatOwner(t *testing.T, p string) (uid uint32, mode uint32) {
	t.Helper()
	var sb unix.Stat_t
	if err := unix.Lstat(p, &sb); err != nil {
		t.Fatal(err)
	}
	return sb.Uid, sb.Mode
}

// TestShiftOwners checks the fallback chown: every entry moves into the range,
// set-id bits survive, a symbolic link is changed itself and its target (a
// host file) is not.
func TestShiftOwners(t *testing.T) {
	testenv.RequiresRoot(t)
	const base = 1_000_000
	host := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(host, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	suid := filepath.Join(root, "a", "b", "suid")
	if err := os.WriteFile(suid, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(suid, 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(root, "a"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(root, "a", "link")); err != nil {
		t.Fatal(err)
	}
	if err := shiftOwners(root, base); err != nil {
		t.Fatalf("shiftOwners: %v", err)
	}
	for p, want := range map[string]uint32{root: base, filepath.Join(root, "a"): base + 1000, suid: base, filepath.Join(root, "a", "link"): base} {
		if uid, _ := lstatOwner(t, p); uid != want {
			t.Errorf("%s: owner %d after the shift, want %d", p, uid, want)
		}
	}
	if _, mode := lstatOwner(t, suid); mode&unix.S_ISUID == 0 {
		t.Errorf("%s lost its setuid bit in the shift (mode %o)", suid, mode)
	}
	if uid, _ := lstatOwner(t, host); uid != 0 {
		t.Errorf("the host file a symlink of the tree points to was chowned to %d", uid)
	}
	if err := shiftOwners(root, base); err != nil {
		t.Errorf("a second shift of the same tree: %v, want a no-op", err)
	}
}

// TestShiftOwnersSwapRace swaps a directory of the tree with a symbolic link
// to a host directory while the shift walks it: the host files keep their
// owner. A shift that resolves joined paths (filepath.WalkDir + Lchown) is
// led through the link within a few rounds.
func TestShiftOwnersSwapRace(t *testing.T) {
	testenv.RequiresRoot(t)
	const base = 1_000_000
	host := filepath.Join(t.TempDir(), "host")
	var hostFiles []string
	for i := range 64 {
		p := filepath.Join(host, "f"+strconv.Itoa(i))
		if err := os.MkdirAll(host, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		hostFiles = append(hostFiles, p)
	}
	var swaps int64
	for round := range 100 {
		root := filepath.Join(t.TempDir(), "root")
		d := filepath.Join(root, "d")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range 64 {
			if err := os.WriteFile(filepath.Join(d, "f"+strconv.Itoa(i)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		r := swaprace.Start(t, d, host)
		_ = shiftOwners(root, base) // may refuse a tree that changed under it; must not leave it
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		swaps += r.Swaps()
		for _, p := range hostFiles {
			if uid, _ := lstatOwner(t, p); uid != 0 {
				t.Fatalf("round %d: host file %s was chowned to %d through the swapped link", round, p, uid)
			}
		}
		if err := os.RemoveAll(root); err != nil {
			t.Fatal(err)
		}
	}
	if swaps == 0 {
		t.Fatal("the racer never swapped: the race did not run")
	}
}

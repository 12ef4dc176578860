package template

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/spacesandbox/space/internal/testenv/swaprace"
)

// TestCopyDirSwapRace copies a source tree while a racer swaps one of its
// directories with a symbolic link to a host directory: no copy ever holds
// the host file's content (the source is read through an os.Root, so the
// swapped link is refused, not followed).
func TestCopyDirSwapRace(t *testing.T) {
	host := filepath.Join(t.TempDir(), "host")
	if err := os.MkdirAll(host, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "secret"), []byte("host-secret-bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "src")
	if err := os.MkdirAll(filepath.Join(src, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "d", "mine"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := swaprace.Start(t, filepath.Join(src, "d"), host)
	for round := range 200 {
		dest := filepath.Join(t.TempDir(), "dest"+strconv.Itoa(round))
		if err := os.Mkdir(dest, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = copyDir(context.Background(), src, dest, io.Discard) // refusing is fine; what it left is checked
		err := filepath.WalkDir(dest, func(p string, de fs.DirEntry, err error) error {
			if err != nil || !de.Type().IsRegular() {
				return err
			}
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("host-secret")) {
				t.Fatalf("round %d: %s holds a host file's content, read through the swapped link", round, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if r.Swaps() == 0 {
		t.Fatal("the racer never swapped: the race did not run")
	}
}

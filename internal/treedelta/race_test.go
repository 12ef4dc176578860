package treedelta

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/testenv/swaprace"
)

// TestApplySwapRace applies streams of files into a directory of the tree
// while a racer swaps that directory with a symbolic link to a directory
// outside: nothing is ever written outside (Apply opens every parent with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so it writes inside or refuses).
func TestApplySwapRace(t *testing.T) {
	testenv.RequiresRoot(t)
	var entries []entry
	for i := range 200 {
		entries = append(entries, reg("sub/f"+strconv.Itoa(i), "pwned"))
	}
	s := stream(t, entries...)
	var swaps int64
	for range 50 {
		target, outside, check := attackDirs(t)
		r := swaprace.Start(t, filepath.Join(target, "sub"), outside)
		_, _ = Apply(context.Background(), target, bytes.NewReader(s), Limits{}) // refusing is fine
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		swaps += r.Swaps()
		check()
	}
	if swaps == 0 {
		t.Fatal("the racer never swapped: the race did not run")
	}
}

// TestDiffSwapRace diffs a tree while a racer swaps one of its directories
// with a symbolic link to a directory outside: the stream never carries the
// outside file's content (Diff walks by directory descriptor with
// O_NOFOLLOW).
func TestDiffSwapRace(t *testing.T) {
	testenv.RequiresRoot(t)
	empty := t.TempDir()
	var swaps int64
	for range 50 {
		target, outside, _ := attackDirs(t)
		write(t, filepath.Join(outside, "secret"), "outside-secret-bytes", 0o600)
		for i := range 100 {
			write(t, filepath.Join(target, "sub", "f"+strconv.Itoa(i)), "inside", 0o644)
		}
		r := swaprace.Start(t, filepath.Join(target, "sub"), outside)
		var buf bytes.Buffer
		_, _ = Diff(context.Background(), empty, target, &buf) // refusing is fine
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		swaps += r.Swaps()
		if bytes.Contains(buf.Bytes(), []byte("outside-secret-bytes")) {
			t.Fatal("the stream carries the content of a file outside the tree, read through the swapped link")
		}
	}
	if swaps == 0 {
		t.Fatal("the racer never swapped: the race did not run")
	}
}

// TestDiffRefusesHardLinkOutside exports a tree holding a hard link to a
// file outside it (on the same filesystem, as a tree on a host filesystem
// could): Diff refuses, and two links inside the tree are fine.
func TestDiffRefusesHardLinkOutside(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	empty, tree, outside := filepath.Join(dir, "empty"), filepath.Join(dir, "tree"), filepath.Join(dir, "outside")
	write(t, filepath.Join(outside, "secret"), "host secret", 0o600)
	write(t, filepath.Join(tree, "a"), "mine", 0o644)
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(tree, "a"), filepath.Join(tree, "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := Diff(context.Background(), empty, tree, io.Discard); err != nil {
		t.Fatalf("a tree with two links of one file, both inside: %v", err)
	}
	if err := os.Link(filepath.Join(outside, "secret"), filepath.Join(tree, "h")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, err := Diff(context.Background(), empty, tree, &buf)
	if !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("Diff of a tree with a hard link to a file outside: %v, want PermissionDenied", err)
	}
	if _, err := Apply(context.Background(), t.TempDir(), &buf, Limits{}); err == nil {
		t.Error("the refused stream applies: it must have no end marker")
	}
}

// TestDiffLimits: Diff stops at the limits Apply would refuse at.
func TestDiffLimits(t *testing.T) {
	empty := t.TempDir()
	tree := t.TempDir()
	for i := range 10 {
		write(t, filepath.Join(tree, "f"+strconv.Itoa(i)), "0123456789", 0o644)
	}
	write(t, filepath.Join(tree, strings.Repeat("d/", 12)+"f"), "x", 0o644)
	for _, tt := range []struct {
		name string
		lim  Limits
	}{
		{"entries", Limits{MaxEntries: 5}},
		{"bytes", Limits{MaxBytes: 50}},
		{"file size", Limits{MaxFileSize: 9}},
		{"depth", Limits{MaxDepth: 8}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DiffLimited(context.Background(), empty, tree, io.Discard, tt.lim)
			if !errors.Is(err, errdefs.ErrResourceExhausted) {
				t.Errorf("DiffLimited(%+v) = %v, want ResourceExhausted", tt.lim, err)
			}
		})
	}
	if _, err := DiffLimited(context.Background(), empty, tree, io.Discard, Limits{MaxEntries: 30, MaxBytes: 101, MaxDepth: 16}); err != nil {
		t.Errorf("DiffLimited within every limit: %v", err)
	}
}

package treedelta

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// FuzzApply feeds arbitrary streams to Apply on a small tree next to an
// "outside" directory: it must never panic and never touch anything outside.
func FuzzApply(f *testing.F) {
	f.Add(stream(f, dirEntry("d"), reg("d/f", "content"), symlink("l", "d"), hardlink("h", "d/f"), whiteout("sub")))
	f.Add(stream(f, symlink("a", "../outside"), reg("a/secret", "pwned")))
	f.Add(stream(f, reg("../outside/secret", "x"), whiteout("..")))
	f.Add(stream(f, hardlink("h", "baselink/secret"), dirEntry("."), entry{hdr: fifoHeader("p")}))
	f.Add([]byte("garbage"))
	mem := memDir(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir, err := os.MkdirTemp(mem, "case")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		target, outside := filepath.Join(dir, "target"), filepath.Join(dir, "outside")
		os.MkdirAll(filepath.Join(target, "sub"), 0o755)
		os.MkdirAll(outside, 0o755)
		os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600)
		os.Symlink(outside, filepath.Join(target, "baselink"))
		Apply(context.Background(), target, bytes.NewReader(data), Limits{MaxBytes: 1 << 20, MaxEntries: 1000})
		ents, _ := os.ReadDir(outside)
		b, err := os.ReadFile(filepath.Join(outside, "secret"))
		if len(ents) != 1 || err != nil || string(b) != "secret" {
			t.Fatalf("outside changed: %d entries, secret %q %v", len(ents), b, err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 2 {
			t.Fatalf("the parent of the tree has %d entries, want 2", len(ents))
		}
	})
}

// memDir returns a temporary directory on tmpfs when /dev/shm is usable, to
// keep the fuzzer off the slow disk.
func memDir(tb testing.TB) string {
	dir, err := os.MkdirTemp("/dev/shm", "treedelta-fuzz")
	if err != nil {
		return tb.TempDir()
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestApplyMutatedStreams applies randomly corrupted valid streams (a
// deterministic complement to FuzzApply): Apply must return, and never touch
// anything outside the tree.
func TestApplyMutatedStreams(t *testing.T) {
	seeds := [][]byte{
		stream(t, dirEntry("d"), reg("d/f", "content"), symlink("l", "d"), hardlink("h", "d/f"), whiteout("sub"), dirEntry(".")),
		stream(t, symlink("a", "../outside"), reg("a/secret", "pwned"), entry{hdr: fifoHeader("p")}),
	}
	mem := memDir(t)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 1500; i++ {
		in := bytes.Clone(seeds[r.IntN(len(seeds))])
		for range r.IntN(4) + 1 {
			in[r.IntN(len(in))] = byte(r.Uint32())
		}
		dir, err := os.MkdirTemp(mem, "case")
		if err != nil {
			t.Fatal(err)
		}
		target, outside := filepath.Join(dir, "target"), filepath.Join(dir, "outside")
		os.MkdirAll(filepath.Join(target, "sub"), 0o755)
		os.MkdirAll(outside, 0o755)
		os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600)
		os.Symlink(outside, filepath.Join(target, "baselink"))
		Apply(context.Background(), target, bytes.NewReader(in), Limits{MaxBytes: 1 << 20, MaxEntries: 1000})
		ents, _ := os.ReadDir(outside)
		if b, err := os.ReadFile(filepath.Join(outside, "secret")); len(ents) != 1 || err != nil || string(b) != "secret" {
			t.Fatalf("mutation %d: outside changed", i)
		}
		os.RemoveAll(dir)
	}
}

package ext4tar

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzWrite: any image, however mangled, makes Write return (within the
// limits, without a panic) and what it wrote before returning is a tar
// stream whose names stay relative and free of "..".
func FuzzWrite(f *testing.F) {
	dir := f.TempDir()
	os.MkdirAll(filepath.Join(dir, "d", "e"), 0o755)
	os.WriteFile(filepath.Join(dir, "d", "file"), bytes.Repeat([]byte("x"), 5000), 0o644)
	os.Symlink("d/file", filepath.Join(dir, "link"))
	os.Link(filepath.Join(dir, "d", "file"), filepath.Join(dir, "hard"))
	img := mkfs(f, dir, 1<<20, "-b", "1024", "-N", "32", "-O", "^has_journal,^resize_inode")
	seed, err := os.ReadFile(img)
	if err != nil {
		f.Fatal(err)
	}
	// Only the first 64 KiB (superblock, descriptors, inode tables, the
	// first directories and files) are mutated; the rest stays as made.
	const head = 64 << 10
	f.Add(seed[:head])
	f.Fuzz(func(t *testing.T, prefix []byte) {
		image := append([]byte(nil), seed...)
		copy(image, prefix)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out bytes.Buffer
		err := Write(ctx, bytes.NewReader(image), int64(len(image)), &out, Limits{MaxEntries: 10000, MaxDepth: 32, MaxBytes: 8 << 20})
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Write did not end within 10 s")
		}
		tr := tar.NewReader(&out)
		for {
			h, err := tr.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, tar.ErrHeader) {
					t.Fatalf("reading the stream back: %v", err)
				}
				return
			}
			if filepath.IsAbs(h.Name) || h.Name == ".." || bytes.Contains([]byte("/"+h.Name+"/"), []byte("/../")) {
				t.Fatalf("entry %q: absolute or with ..", h.Name)
			}
		}
	})
}

package ext4tar

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzWrite: any image, however mangled (an ext4 image a guest could have
// written, with bytes changed anywhere), makes Write return (within the
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
	// The input is a list of patches of the made image, 5 bytes each: a
	// little-endian offset (modulo the image's size) and the byte to put
	// there, so that small inputs reach every structure (superblock,
	// descriptors, inodes, extents, directory blocks) of a 1 MiB image.
	f.Add([]byte{})
	f.Add([]byte{0x00, 0x04, 0, 0, 0xff}) // the superblock's inode count
	f.Add([]byte{0x18, 0x04, 0, 0, 0x07}) // block size 1024<<7
	f.Fuzz(func(t *testing.T, patches []byte) {
		image := append([]byte(nil), seed...)
		for i := 0; i+5 <= len(patches); i += 5 {
			off := binary.LittleEndian.Uint32(patches[i:]) % uint32(len(image))
			image[off] = patches[i+4]
		}
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

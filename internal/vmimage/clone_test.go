package vmimage

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestCloneImageFrom(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.img")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	f.Truncate(size)
	f.WriteAt([]byte("superblock"), 1024)
	f.WriteAt(bytes.Repeat([]byte("data"), 4096), 32<<20)
	f.Close()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	// The clone copies the open file even after its path names another.
	os.Rename(src, src+".old")
	os.WriteFile(src, []byte("replacement"), 0o600)
	dst := filepath.Join(dir, "dst.img")
	if err := CloneImageFrom(context.Background(), in, dst); err != nil {
		t.Fatalf("CloneImageFrom: %v", err)
	}
	want, _ := os.ReadFile(src + ".old")
	got, _ := os.ReadFile(dst)
	if !bytes.Equal(got, want) {
		t.Fatalf("clone differs from the source (%d and %d bytes)", len(got), len(want))
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dst, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > 8<<20 {
		t.Errorf("clone takes %d bytes on disk; the holes of the %d-byte image were filled", st.Blocks*512, size)
	}
	if err := CloneImageFrom(context.Background(), in, dst); err == nil {
		t.Error("CloneImageFrom over an existing file succeeded")
	}
}

// TestCloneImageFromAcrossFilesystems: copy_file_range refuses to copy across
// file system types (EXDEV); the clone falls back to a buffered copy.
func TestCloneImageFromAcrossFilesystems(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "clone-src-")
	if err != nil {
		t.Skipf("no /dev/shm to copy from: %v", err)
	}
	defer os.RemoveAll(shm)
	srcPath := filepath.Join(shm, "src.img")
	want := bytes.Repeat([]byte("cross-fs "), 100000)
	f, _ := os.Create(srcPath)
	f.WriteAt(want, 1<<20) // a hole first, then data
	f.Close()
	src, err := os.Open(srcPath)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(t.TempDir(), "dst.img")
	if err := CloneImageFrom(context.Background(), src, dst); err != nil {
		t.Fatalf("clone from tmpfs to %s: %v", filepath.Dir(dst), err)
	}
	got, _ := os.ReadFile(dst)
	if len(got) != 1<<20+len(want) || !bytes.Equal(got[1<<20:], want) {
		t.Fatalf("clone differs: %d bytes", len(got))
	}
}

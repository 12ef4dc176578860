package vm

import (
	"os"
	"path/filepath"
	"testing"
)

func TestImageUsage(t *testing.T) {
	path := filepath.Join(t.TempDir(), diskFile)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	used, size, err := imageUsage(path)
	if err != nil || size != 64<<20 || used > 1<<20 {
		t.Fatalf("empty sparse image: %d of %d, %v; want about 0 of 64 MiB", used, size, err)
	}
	// 4 MiB written at 8 MiB: allocated, the size unchanged.
	if _, err := f.WriteAt(make([]byte, 4<<20), 8<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	used, size, err = imageUsage(path)
	if err != nil || size != 64<<20 || used < 4<<20 || used > 6<<20 {
		t.Fatalf("after 4 MiB written: %d of %d, %v; want about 4 of 64 MiB", used, size, err)
	}
	if _, _, err := imageUsage(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing image: no error")
	}
}

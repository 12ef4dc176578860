package blockdelta

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkDiff diffs a 1 GiB sparse image (384 MiB of data) with 100 MiB of
// changed 64 KiB blocks against its base: on the temp dir's filesystem, where
// the copy shares nothing and every data block is compared, and on btrfs where
// the image is a reflink and FIEMAP skips the shared extents.
func BenchmarkDiff(b *testing.B) {
	b.Run("tmpdir", func(b *testing.B) { benchDiff(b, b.TempDir()) })
	b.Run("btrfs", func(b *testing.B) { benchDiff(b, btrfsDir(b, 3<<30)) })
}

func benchDiff(b *testing.B, dir string) {
	const (
		size    = 1 << 30
		bs      = 64 << 10
		data    = 384 << 20
		changed = 100 << 20
	)
	base, err := os.OpenFile(filepath.Join(dir, "base"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer base.Close()
	base.Truncate(size)
	src := testRand(11)
	buf := make([]byte, 4<<20)
	// 96 runs of 4 MiB spread over the image: sparse, as a fresh ext4 is.
	for off := int64(0); off < size && off/(size/96)*int64(len(buf)) < data; off += size / 96 {
		src.Read(buf)
		if _, err := base.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	base.Sync()
	image := cloneFile(b, base, filepath.Join(dir, "image"))
	r := rand.New(rand.NewPCG(1, 1))
	blk := make([]byte, bs)
	for range changed / bs {
		src.Read(blk)
		if _, err := image.WriteAt(blk, r.Int64N(size/bs)*bs); err != nil {
			b.Fatal(err)
		}
	}
	image.Sync()
	b.SetBytes(size)
	b.ResetTimer()
	var st Stats
	for b.Loop() {
		st, err = Diff(context.Background(), base, image, io.Discard, Options{BaseID: "bench"})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(st.BytesRead)/(1<<20), "MiB-read/op")
	b.ReportMetric(float64(st.StreamBytes)/(1<<20), "MiB-stream/op")
}

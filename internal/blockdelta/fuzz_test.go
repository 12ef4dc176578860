package blockdelta

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
)

// FuzzApply feeds arbitrary streams to Apply: it must never panic, and when it
// accepts a stream the output has the declared size within the limit.
//
// The first input byte chooses the mode: odd means the rest is a stream
// without its digest and the fuzz function appends the right one, so that
// mutations past the header are judged by the field checks rather than all
// stopped by the digest; even means the rest is a stream as is.
func FuzzApply(f *testing.F) {
	// Small inputs keep the fuzzer fast: a 20000-byte base, 4 KiB blocks.
	dir := memDir(f)
	base := newFile(f, filepath.Join(dir, "base"), 20000, map[int64][]byte{0: bytes.Repeat([]byte("base"), 3000)})
	image := cloneFile(f, base, filepath.Join(dir, "image"))
	image.WriteAt([]byte("changed"), 5000)
	image.WriteAt(make([]byte, 4096), 8192)
	image.Truncate(30000)
	var seed bytes.Buffer
	if _, err := Diff(context.Background(), base, image, &seed, Options{BaseID: testBaseID, BlockSize: 4096}); err != nil {
		f.Fatal(err)
	}
	stream := seed.Bytes()
	f.Add(append([]byte{0}, stream...))
	body := func(b []byte) []byte { return append([]byte{1}, b[:len(b)-sha256.Size]...) }
	f.Add(body(stream))
	f.Add(body(newForge(4096, 8192, 20000, testBaseID).rec(kindZero, 0, 4096, nil).bytes()))
	f.Add(body(newForge(4096, 300000, 20000, testBaseID).rec(kindData, 4096, 4096, make([]byte, 4096)).rec(kindZero, 8192, 4096, nil).bytes()))
	f.Add(body(newForge(4096, 300000, 20000, testBaseID).bytes()))
	f.Add([]byte("\x00SPACEBLK"))
	const maxImage = 1 << 20
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		in := data[1:]
		if data[0]&1 == 1 {
			sum := sha256.Sum256(in)
			in = append(bytes.Clone(in), sum[:]...)
		}
		out, err := os.CreateTemp(dir, "out")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(out.Name())
		defer out.Close()
		st, err := Apply(context.Background(), base, bytes.NewReader(in), out, ApplyOptions{BaseID: testBaseID, MaxImageSize: maxImage})
		if err != nil {
			return
		}
		fi, err := out.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != st.ImageSize || st.ImageSize > maxImage {
			t.Fatalf("accepted stream: output has %d bytes, header says %d (limit %d)", fi.Size(), st.ImageSize, maxImage)
		}
	})
}

// memDir returns a temporary directory on tmpfs when /dev/shm is usable: on a
// disk filesystem, punching holes in freshly written pages waits for their
// writeback and slows the fuzzer to a few executions a second.
func memDir(tb testing.TB) string {
	dir, err := os.MkdirTemp("/dev/shm", "blockdelta-fuzz")
	if err != nil {
		return tb.TempDir()
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

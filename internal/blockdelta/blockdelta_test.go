package blockdelta

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"golang.org/x/sys/unix"
)

const testBaseID = "template tpl-1 sha256:abc"

// newFile creates path with size bytes and the given chunks written at their
// offsets; everything else is a hole.
func newFile(t testing.TB, path string, size int64, chunks map[int64][]byte) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off, b := range chunks {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// cloneFile makes a copy of src at path (a reflink where possible).
func cloneFile(t testing.TB, src *os.File, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, err := src.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := cloneInto(f, src, fi.Size()); err != nil {
		t.Fatal(err)
	}
	return f
}

func testRand(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	s[0] = byte(seed)
	return rand.NewChaCha8(s)
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func digestFile(t testing.TB, f *os.File) ([32]byte, int64) {
	t.Helper()
	h := sha256.New()
	n, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		t.Fatal(err)
	}
	var d [32]byte
	copy(d[:], h.Sum(nil))
	return d, n
}

// roundTrip diffs image against base, applies the stream to a fresh file and
// checks that the result equals image.
func roundTrip(t *testing.T, base, image *os.File, opts Options) (Stats, []byte) {
	t.Helper()
	var buf bytes.Buffer
	st, err := Diff(context.Background(), base, image, &buf, opts)
	if err != nil {
		t.Fatalf("Diff: %v", err)
	}
	if st.StreamBytes != int64(buf.Len()) {
		t.Errorf("Stats.StreamBytes = %d, stream has %d bytes", st.StreamBytes, buf.Len())
	}
	out := newFile(t, filepath.Join(t.TempDir(), "out"), 0, nil)
	ast, err := Apply(context.Background(), base, bytes.NewReader(buf.Bytes()), out, ApplyOptions{BaseID: opts.BaseID, MaxImageSize: 1 << 40})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if ast.DataRecords != st.DataRecords || ast.ZeroRecords != st.ZeroRecords {
		t.Errorf("Apply saw %d data / %d zero records, Diff wrote %d / %d", ast.DataRecords, ast.ZeroRecords, st.DataRecords, st.ZeroRecords)
	}
	want, wn := digestFile(t, image)
	got, gn := digestFile(t, out)
	if want != got || wn != gn {
		t.Fatalf("applied image (%d bytes) differs from the image (%d bytes)", gn, wn)
	}
	return st, buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	const mib = 1 << 20
	type edit struct {
		off  int64
		data []byte
	}
	r := rand.New(rand.NewPCG(1, 2))
	baseChunks := map[int64][]byte{0: randBytes(r, mib), 3 * mib: randBytes(r, 2*mib+777), 8*mib - 100: randBytes(r, 100)}
	tests := []struct {
		name  string
		size  int64 // image size; 0 keeps the base's
		edits []edit
		punch [][2]int64
		bs    int
	}{
		{name: "identical"},
		{name: "random writes", edits: []edit{{5, randBytes(r, 10)}, {mib + 4096, randBytes(r, 70000)}, {3*mib + 65536*3, randBytes(r, 1)}, {6 * mib, randBytes(r, 65536)}}},
		{name: "zeroed regions", edits: []edit{{0, make([]byte, 3*65536)}, {3 * mib, make([]byte, 10)}}},
		{name: "punched holes", punch: [][2]int64{{0, mib}, {3*mib + 4096, 65536}}},
		{name: "truncated", size: 3*mib + 12345},
		{name: "truncated to zero", size: 0},
		{name: "extended", size: 20*mib + 3, edits: []edit{{15 * mib, randBytes(r, 5000)}, {20*mib + 1, []byte{1, 2}}}},
		{name: "extended sparse", size: 64 * mib},
		{name: "small blocks", bs: 4096, edits: []edit{{100, randBytes(r, 10000)}}, punch: [][2]int64{{3 * mib, 8192}}},
		{name: "big blocks", bs: 4 << 20, edits: []edit{{7 * mib, randBytes(r, 10)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			base := newFile(t, filepath.Join(dir, "base"), 8*mib, baseChunks)
			image := cloneFile(t, base, filepath.Join(dir, "image"))
			if tt.size != 0 || tt.name == "truncated to zero" {
				if err := image.Truncate(tt.size); err != nil {
					t.Fatal(err)
				}
			}
			for _, e := range tt.edits {
				if _, err := image.WriteAt(e.data, e.off); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range tt.punch {
				if err := unix.Fallocate(int(image.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, p[0], p[1]); err != nil {
					t.Fatal(err)
				}
			}
			st, _ := roundTrip(t, base, image, Options{BaseID: testBaseID, BlockSize: tt.bs})
			if tt.name == "identical" && st.DataRecords+st.ZeroRecords != 0 {
				t.Errorf("identical files gave %d data and %d zero records", st.DataRecords, st.ZeroRecords)
			}
			if tt.name == "extended sparse" && st.DataRecords+st.ZeroRecords != 0 {
				t.Errorf("a sparse extension gave %d data and %d zero records, want none", st.DataRecords, st.ZeroRecords)
			}
		})
	}
}

// TestRoundTripRandom diffs many random histories: random base, random writes,
// holes and size changes.
func TestRoundTripRandom(t *testing.T) {
	for seed := range uint64(25) {
		r := rand.New(rand.NewPCG(seed, 7))
		dir := t.TempDir()
		size := int64(r.IntN(4<<20) + 1)
		chunks := map[int64][]byte{}
		for range r.IntN(6) {
			off := r.Int64N(size)
			chunks[off] = randBytes(r, int(min(size-off, int64(r.IntN(300000)+1))))
		}
		base := newFile(t, filepath.Join(dir, "base"), size, chunks)
		image := cloneFile(t, base, filepath.Join(dir, "image"))
		for range r.IntN(20) {
			switch r.IntN(4) {
			case 0, 1:
				off := r.Int64N(size + 1<<20)
				if _, err := image.WriteAt(randBytes(r, r.IntN(100000)+1), off); err != nil {
					t.Fatal(err)
				}
			case 2:
				off := r.Int64N(size)
				if err := unix.Fallocate(int(image.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, r.Int64N(1<<20)+1); err != nil {
					t.Fatal(err)
				}
			case 3:
				if err := image.Truncate(r.Int64N(size * 2)); err != nil {
					t.Fatal(err)
				}
			}
		}
		bs := MinBlockSize << r.IntN(5)
		roundTrip(t, base, image, Options{BaseID: testBaseID, BlockSize: bs})
	}
}

// fixture returns a base, an image that differs from it, and the stream.
func fixture(t testing.TB) (base *os.File, stream []byte) {
	t.Helper()
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(3, 4))
	base = newFile(t, filepath.Join(dir, "base"), 300000, map[int64][]byte{0: randBytes(r, 200000)})
	image := cloneFile(t, base, filepath.Join(dir, "image"))
	image.WriteAt(randBytes(r, 5000), 70000)
	image.WriteAt(make([]byte, 65536), 131072)
	image.Truncate(400000)
	image.WriteAt([]byte("tail"), 399000)
	var buf bytes.Buffer
	st, err := Diff(context.Background(), base, image, &buf, Options{BaseID: testBaseID})
	if err != nil {
		t.Fatal(err)
	}
	if st.DataRecords == 0 || st.ZeroRecords == 0 {
		t.Fatalf("fixture: want data and zero records, got %+v", st)
	}
	return base, buf.Bytes()
}

func applyBytes(t testing.TB, base *os.File, stream []byte, opts ApplyOptions) error {
	t.Helper()
	out := newFile(t, filepath.Join(t.TempDir(), "out"), 0, nil)
	_, err := Apply(context.Background(), base, bytes.NewReader(stream), out, opts)
	return err
}

func TestApplyRefusesTampering(t *testing.T) {
	base, stream := fixture(t)
	opts := ApplyOptions{BaseID: testBaseID, MaxImageSize: 1 << 30}
	if err := applyBytes(t, base, stream, opts); err != nil {
		t.Fatalf("Apply of the untouched stream: %v", err)
	}
	// Every single flipped byte is caught (by a field check or the digest).
	for i := 0; i < len(stream); i += 1 + i/50 {
		bad := bytes.Clone(stream)
		bad[i] ^= 0x40
		if err := applyBytes(t, base, bad, opts); err == nil {
			t.Fatalf("Apply accepted the stream with byte %d flipped", i)
		}
	}
	for _, n := range []int{0, 10, headerLen, headerLen + 5, len(stream) / 2, len(stream) - 1} {
		if err := applyBytes(t, base, stream[:n], opts); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Apply of the stream truncated to %d bytes: got %v, want invalid argument", n, err)
		}
	}
	if err := applyBytes(t, base, append(bytes.Clone(stream), 0), opts); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Apply with a trailing byte: got %v, want invalid argument", err)
	}
	if err := applyBytes(t, base, stream, ApplyOptions{BaseID: "another template", MaxImageSize: 1 << 30}); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Apply with another base id: got %v, want failed precondition", err)
	}
	if err := applyBytes(t, base, stream, ApplyOptions{BaseID: testBaseID, MaxImageSize: 1000}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Apply over MaxImageSize: got %v, want invalid argument", err)
	}
	other := newFile(t, filepath.Join(t.TempDir(), "other"), 300001, nil)
	if err := applyBytes(t, other, stream, opts); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Apply on a base of another size: got %v, want failed precondition", err)
	}
	notEmpty := newFile(t, filepath.Join(t.TempDir(), "out"), 1, nil)
	if _, err := Apply(context.Background(), base, bytes.NewReader(stream), notEmpty, opts); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Apply into a non-empty file: got %v, want invalid argument", err)
	}
}

// forge builds a stream with a valid digest from raw records, to reach the
// field checks behind the digest.
type forge struct {
	buf bytes.Buffer
	n   uint64
}

func newForge(bs uint32, imageSize uint64, baseSize int64, baseID string) *forge {
	f := &forge{}
	h := header{blockSize: int(bs), baseSize: baseSize, baseID: BaseDigest(baseID)}
	b := h.marshal()
	binary.BigEndian.PutUint32(b[12:], bs) // allow invalid sizes
	binary.BigEndian.PutUint64(b[16:], imageSize)
	f.buf.Write(b)
	return f
}

func (f *forge) rec(kind byte, off uint64, length uint32, data []byte) *forge {
	var b [recordHeaderLen]byte
	b[0] = kind
	binary.BigEndian.PutUint64(b[1:], off)
	binary.BigEndian.PutUint32(b[9:], length)
	f.buf.Write(b[:])
	f.buf.Write(data)
	f.n++
	return f
}

func (f *forge) bytes() []byte {
	var b [9]byte
	b[0] = kindEnd
	binary.BigEndian.PutUint64(b[1:], f.n)
	f.buf.Write(b[:])
	sum := sha256.Sum256(f.buf.Bytes())
	return append(bytes.Clone(f.buf.Bytes()), sum[:]...)
}

func TestApplyRefusesHostileFields(t *testing.T) {
	base := newFile(t, filepath.Join(t.TempDir(), "base"), 100000, map[int64][]byte{0: []byte("base")})
	const bs = 65536
	blk := make([]byte, bs)
	blk[0] = 1
	tests := []struct {
		name   string
		stream []byte
	}{
		{"block size not a power of two", newForge(65535, 100000, 100000, testBaseID).bytes()},
		{"block size too small", newForge(512, 100000, 100000, testBaseID).bytes()},
		{"block size too large", newForge(8<<20, 100000, 100000, testBaseID).bytes()},
		{"image size huge", newForge(bs, 1<<63, 100000, testBaseID).bytes()},
		{"unaligned offset", newForge(bs, 200000, 100000, testBaseID).rec(kindData, 1, bs, blk).bytes()},
		{"offset beyond image", newForge(bs, 200000, 100000, testBaseID).rec(kindZero, 4*bs, bs, nil).bytes()},
		{"offset overflows", newForge(bs, 200000, 100000, testBaseID).rec(kindZero, 1<<63, bs, nil).bytes()},
		{"length over block size", newForge(bs, 200000, 100000, testBaseID).rec(kindZero, 0, bs+1, nil).bytes()},
		{"short length", newForge(bs, 200000, 100000, testBaseID).rec(kindData, 0, 10, blk[:10]).bytes()},
		{"wrong tail length", newForge(bs, 200000, 100000, testBaseID).rec(kindZero, 3*bs, bs, nil).bytes()},
		{"repeated offset", newForge(bs, 200000, 100000, testBaseID).rec(kindZero, 0, bs, nil).rec(kindZero, 0, bs, nil).bytes()},
		{"decreasing offsets", newForge(bs, 200000, 100000, testBaseID).rec(kindZero, bs, bs, nil).rec(kindZero, 0, bs, nil).bytes()},
		{"unknown kind", newForge(bs, 200000, 100000, testBaseID).rec(7, 0, bs, nil).bytes()},
		{"data cut short", newForge(bs, 200000, 100000, testBaseID).rec(kindData, 0, bs, blk[:100]).bytes()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := applyBytes(t, base, tt.stream, ApplyOptions{BaseID: testBaseID, MaxImageSize: 1 << 40})
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("got %v, want invalid argument", err)
			}
		})
	}
	t.Run("record count limit", func(t *testing.T) {
		s := newForge(bs, 200000, 100000, testBaseID).rec(kindZero, 0, bs, nil).rec(kindZero, bs, bs, nil).bytes()
		if err := applyBytes(t, base, s, ApplyOptions{BaseID: testBaseID, MaxImageSize: 1 << 40}); err != nil {
			t.Fatalf("two records: %v", err)
		}
		err := applyBytes(t, base, s, ApplyOptions{BaseID: testBaseID, MaxImageSize: 1 << 40, MaxRecords: 1})
		if !errdefs.IsInvalidArgument(err) {
			t.Fatalf("two records over MaxRecords 1: got %v, want invalid argument", err)
		}
	})
	t.Run("trailer count", func(t *testing.T) {
		f := newForge(bs, 200000, 100000, testBaseID).rec(kindZero, 0, bs, nil)
		f.n = 5
		if err := applyBytes(t, base, f.bytes(), ApplyOptions{BaseID: testBaseID, MaxImageSize: 1 << 40}); !errdefs.IsInvalidArgument(err) {
			t.Fatalf("got %v, want invalid argument", err)
		}
	})
}

func TestDiffOptionsAndCancel(t *testing.T) {
	base, _ := fixture(t)
	if _, err := Diff(context.Background(), base, base, io.Discard, Options{BlockSize: 3000}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("block size 3000: got %v, want invalid argument", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Diff(ctx, base, base, io.Discard, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Diff with a cancelled context: got %v, want context.Canceled", err)
	}
	if _, err := Apply(context.Background(), base, bytes.NewReader(nil), base, ApplyOptions{}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Apply without MaxImageSize: got %v, want invalid argument", err)
	}
}

package objstoretest

import (
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
)

// LargeSize is the size of the object testLargeStreaming streams through
// the store without holding it.
const LargeSize = 64 << 20

// heapProbe passes a stream through and samples the live heap every few MiB,
// so a test can tell a driver that streams from one that buffers the object.
type heapProbe struct {
	r     io.Reader
	every int64
	next  int64
	read  int64
	peak  uint64
}

func (h *heapProbe) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.read += int64(n)
	if h.read >= h.next {
		h.next += h.every
		if a := heapAlloc(); a > h.peak {
			h.peak = a
		}
	}
	return n, err
}

func heapAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func testLargeStreaming(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	wantSize, wantDigest, err := DigestOf(Generator(42, LargeSize))
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	base := heapAlloc()
	probe := &heapProbe{r: Generator(42, LargeSize), every: 4 << 20}
	info, err := s.Put(ctx, "big/x", onlyReader{probe}, -1)
	if err != nil {
		t.Fatalf("Put of %d MiB: %v", LargeSize>>20, err)
	}
	if info.Size != wantSize || info.Digest != wantDigest {
		t.Errorf("Put info = %d %s, want %d %s", info.Size, info.Digest, wantSize, wantDigest)
	}
	if grew := int64(probe.peak) - int64(base); grew > LargeSize/2 {
		t.Errorf("the heap grew by %d MiB while Put streamed a %d MiB object: the driver buffers objects", grew>>20, LargeSize>>20)
	}
	rc, ginfo, err := s.Get(ctx, "big/x")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	gotSize, gotDigest, err := DigestOf(rc)
	if err != nil || gotSize != wantSize || gotDigest != wantDigest || ginfo.Size != wantSize {
		t.Errorf("Get = %d bytes %s (info %d), %v; want %d bytes %s", gotSize, gotDigest, ginfo.Size, err, wantSize, wantDigest)
	}
	// A range deep inside the object matches the generator's bytes there.
	const off, n = LargeSize - 3<<20 + 7, 1 << 20
	rr, _, err := s.GetRange(ctx, "big/x", off, n)
	if err != nil {
		t.Fatalf("GetRange: %v", err)
	}
	defer rr.Close()
	gen := Generator(42, LargeSize)
	if _, err := io.CopyN(io.Discard, gen, off); err != nil {
		t.Fatal(err)
	}
	_, wantRange, _ := DigestOf(io.LimitReader(gen, n))
	if _, gotRange, err := DigestOf(rr); err != nil || gotRange != wantRange {
		t.Errorf("GetRange deep in the object = %s, %v; want %s", gotRange, err, wantRange)
	}
}

func testVerify(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	info := put(t, s, "v/x", []byte("verify me"))
	if err := objstore.Verify(ctx, s, "v/x", info); err != nil {
		t.Errorf("Verify of an intact object: %v", err)
	}
	put(t, s, "v/x", []byte("verify mE"))
	err := objstore.Verify(ctx, s, "v/x", info)
	wantClass(t, "Verify of a changed object", err, errdefs.ErrFailedPrecondition)
	put(t, s, "v/x", []byte("short"))
	err = objstore.Verify(ctx, s, "v/x", info)
	wantClass(t, "Verify of a resized object", err, errdefs.ErrFailedPrecondition)
	err = objstore.Verify(ctx, s, "v/none", info)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Verify of a missing object: %v, want NotFound", err)
	}
}

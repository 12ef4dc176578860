package envelope

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"testing/iotest"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/kms"
	"github.com/spacesandbox/space/internal/objstore/filestore"
)

func TestRoundTrip(t *testing.T) {
	k, id := newLocalKMS(t)
	aad := artifactAAD("memory")
	for _, chunk := range []int{MinChunkSize, 1000, DefaultChunkSize} {
		for _, n := range []int{0, 1, chunk - 1, chunk, chunk + 1, 3 * chunk, 3*chunk + 5} {
			plain := pattern(n)
			sealed := sealArtifact(t, k, id, aad, plain, chunk)
			got, err := open(k, aad, sealed)
			if err != nil || !bytes.Equal(got, plain) {
				t.Errorf("chunk %d, %d bytes: got %d bytes, %v", chunk, n, len(got), err)
			}
			if n > 16 && bytes.Contains(sealed, plain[:16]) {
				t.Errorf("chunk %d, %d bytes: plaintext visible in the artifact", chunk, n)
			}
		}
	}
}

// TestOddReads drives both sides with awkward read and write sizes.
func TestOddReads(t *testing.T) {
	k, id := newLocalKMS(t)
	aad := artifactAAD("disk")
	plain := pattern(5*MinChunkSize + 3)
	var buf bytes.Buffer
	w, err := NewWriterSize(t.Context(), &buf, k, id, aad, MinChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(plain); i += 7 {
		if _, err := w.Write(plain[i:min(i+7, len(plain))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]io.Reader{
		"one byte": iotest.OneByteReader(bytes.NewReader(buf.Bytes())),
		"half":     iotest.HalfReader(bytes.NewReader(buf.Bytes())),
		"data+EOF": iotest.DataErrReader(bytes.NewReader(buf.Bytes())),
	} {
		r, err := NewReader(t.Context(), src, k, aad)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := io.ReadAll(iotest.OneByteReader(r))
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%s: got %d bytes, %v", name, len(got), err)
		}
		if r.KeyID() != id {
			t.Errorf("KeyID = %s, want %s", r.KeyID(), id)
		}
	}
}

func TestFreshKeys(t *testing.T) {
	k, id := newLocalKMS(t)
	aad := artifactAAD("m")
	a := sealArtifact(t, k, id, aad, pattern(300), MinChunkSize)
	b := sealArtifact(t, k, id, aad, pattern(300), MinChunkSize)
	if bytes.Equal(a[len(a)-100:], b[len(b)-100:]) {
		t.Error("two seals of the same plaintext share ciphertext: data keys or nonces repeat")
	}
}

func TestWriterMisuse(t *testing.T) {
	k, id := newLocalKMS(t)
	var buf bytes.Buffer
	w, err := NewWriter(t.Context(), &buf, k, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := w.Write([]byte("x")); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Write after Close: %v", err)
	}
	for _, size := range []int{0, MinChunkSize - 1, MaxChunkSize + 1} {
		if _, err := NewWriterSize(t.Context(), &buf, k, id, nil, size); !errdefs.IsInvalidArgument(err) {
			t.Errorf("chunk size %d: %v", size, err)
		}
	}
	if _, err := NewWriter(t.Context(), &buf, k, "kek-unknown", nil); !errors.Is(err, kms.ErrKeyNotFound) {
		t.Errorf("unknown key: %v", err)
	}
	// A failing destination makes the Writer fail for good.
	fw, err := NewWriterSize(t.Context(), &limitWriter{n: 1000}, k, id, nil, MinChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fw.Write(pattern(4000))
	if err == nil || !errors.Is(err, errFull) {
		t.Fatalf("Write to a failing destination: %v", err)
	}
	if err := fw.Close(); !errors.Is(err, errFull) {
		t.Errorf("Close after a failed write: %v", err)
	}
}

var errFull = errors.New("destination full")

type limitWriter struct{ n int }

func (l *limitWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		return 0, errFull
	}
	l.n -= len(p)
	return len(p), nil
}

// TestSourceErrorKeepsClass: an object store outage mid-read is reported as
// such, not as corruption, so the caller retries instead of giving up.
func TestSourceErrorKeepsClass(t *testing.T) {
	k, id := newLocalKMS(t)
	sealed := sealArtifact(t, k, id, nil, pattern(10*MinChunkSize), MinChunkSize)
	outage := errors.Join(errors.New("store went away"), errdefs.ErrUnavailable)
	for _, cut := range []int{10, 200, len(sealed) - 1} {
		src := io.MultiReader(bytes.NewReader(sealed[:cut]), iotest.ErrReader(outage))
		r, err := NewReader(t.Context(), src, k, nil)
		if err == nil {
			_, err = io.ReadAll(r)
		}
		if !errdefs.IsUnavailable(err) || errors.Is(err, ErrCorrupt) {
			t.Errorf("outage after %d bytes: err = %v, want Unavailable and not Corrupt", cut, err)
		}
	}
}

func TestUnsupportedVersion(t *testing.T) {
	k, id := newLocalKMS(t)
	sealed := sealArtifact(t, k, id, nil, pattern(10), MinChunkSize)
	sealed[len(magic)] = 2
	_, err := open(k, nil, sealed)
	if !errdefs.IsFailedPrecondition(err) || errors.Is(err, ErrCorrupt) {
		t.Errorf("version 2: err = %v, want FailedPrecondition naming the version", err)
	}
}

// TestThroughObjectStore is the hibernate/restore path in miniature: seal
// straight into a Put through a pipe, then Get and open.
func TestThroughObjectStore(t *testing.T) {
	ctx := t.Context()
	k, id := newLocalKMS(t)
	store, err := filestore.Open(ctx, filepath.Join(t.TempDir(), "objects"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	plain := pattern(3<<20 + 17)
	aad := artifactAAD("memory")
	pr, pw := io.Pipe()
	go func() {
		w, err := NewWriter(ctx, pw, k, id, aad)
		if err == nil {
			_, err = w.Write(plain)
		}
		if err == nil {
			err = w.Close()
		}
		pw.CloseWithError(err)
	}()
	info, err := store.Put(ctx, "t-test/s1/7/memory", pr, -1)
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err := store.Get(ctx, "t-test/s1/7/memory")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	r, err := NewReader(ctx, rc, k, aad)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("restore read %d bytes, %v", len(got), err)
	}
	if info.Size <= int64(len(plain)) {
		t.Errorf("stored %d bytes for %d of plaintext", info.Size, len(plain))
	}
}

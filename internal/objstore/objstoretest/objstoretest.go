// Package objstoretest is the conformance suite of the objstore.Store
// contract, and Faulty, a Store wrapper that fails on demand for the tests
// of objstore's users. Every driver runs the suite from its own tests:
//
//	func TestConformance(t *testing.T) {
//		objstoretest.Run(t, func(t *testing.T) objstore.Store { return openEmpty(t) })
//	}
//
// newStore must return an empty store; the suite closes it at the end of
// each subtest.
package objstoretest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/spacesandbox/space/internal/objstore"
)

// Run runs every conformance test against stores made by newStore.
func Run(t *testing.T, newStore func(t *testing.T) objstore.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s objstore.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"DigestAndSize", testDigestAndSize},
		{"SizeMismatch", testSizeMismatch},
		{"Overwrite", testOverwrite},
		{"Missing", testMissing},
		{"Delete", testDelete},
		{"Range", testRange},
		{"KeyValidation", testKeyValidation},
		{"List", testList},
		{"NestedKeys", testNestedKeys},
		{"FailedPutLeavesNothing", testFailedPut},
		{"CanceledPut", testCanceledPut},
		{"ConcurrentPutsOneKey", testConcurrentPuts},
		{"ReaderSeesOldObject", testReaderSeesOldObject},
		{"LargeStreaming", testLargeStreaming},
		{"Verify", testVerify},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// Generator returns a reader of n deterministic pseudo-random bytes drawn
// from seed, produced on the fly so that tests can stream objects far larger
// than they want to hold in memory. Equal seeds give equal streams.
func Generator(seed uint64, n int64) io.Reader {
	return io.LimitReader(&genReader{rng: rand.NewChaCha8(seedBytes(seed))}, n)
}

type genReader struct{ rng *rand.ChaCha8 }

func (g *genReader) Read(p []byte) (int, error) { return g.rng.Read(p) }

func seedBytes(seed uint64) [32]byte {
	var b [32]byte
	for i := range 8 {
		b[i] = byte(seed >> (8 * i))
	}
	return b
}

// DigestOf streams r and returns its size and objstore digest.
func DigestOf(r io.Reader) (int64, string, error) {
	d := objstore.NewDigester()
	_, err := io.Copy(d, r)
	return d.Size(), d.Digest(), err
}

func put(t *testing.T, s objstore.Store, key string, data []byte) objstore.Info {
	t.Helper()
	info, err := s.Put(t.Context(), key, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
	return info
}

func get(t *testing.T, s objstore.Store, key string) ([]byte, objstore.Info) {
	t.Helper()
	rc, info, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get %s: read: %v", key, err)
	}
	return data, info
}

func wantClass(t *testing.T, what string, err, class error) {
	t.Helper()
	if !errors.Is(err, class) {
		t.Fatalf("%s: err = %v, want class %v", what, err, class)
	}
}

func wantMissing(t *testing.T, s objstore.Store, key string) {
	t.Helper()
	_, err := s.Stat(t.Context(), key)
	wantClass(t, "Stat "+key, err, errNotFound)
	infos, err := s.List(t.Context(), key)
	if err != nil {
		t.Fatalf("List %s: %v", key, err)
	}
	for _, info := range infos {
		if info.Key == key {
			t.Fatalf("List %s shows %s, which should not exist", key, key)
		}
	}
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return objstore.FormatDigest(sum[:])
}

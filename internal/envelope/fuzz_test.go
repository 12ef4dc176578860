package envelope

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
)

// FuzzParseHeader: the header parser never panics, reads at most
// MaxHeaderLen bytes, and what it accepts re-encodes to the bytes it read.
func FuzzParseHeader(f *testing.F) {
	k := newMemKMS()
	for _, n := range []int{0, 100} {
		f.Add(sealArtifact(f, k, memKeyID, nil, pattern(n), MinChunkSize))
	}
	f.Add([]byte(magic))
	f.Add(append([]byte(magic), 1, 0, 0, 0, 64, 1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xff))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		h, raw, err := readHeader(r)
		if consumed := len(data) - r.Len(); consumed > MaxHeaderLen {
			t.Fatalf("read %d bytes of header, over %d", consumed, MaxHeaderLen)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTruncated) && data[len(magic)] == Version {
				t.Fatalf("error without a class: %v", err)
			}
			return
		}
		if !bytes.Equal(h.marshal(), raw) || !bytes.Equal(raw, data[:len(raw)]) {
			t.Fatalf("accepted header does not re-encode to its bytes")
		}
		if h.chunkSize < MinChunkSize || h.chunkSize > MaxChunkSize {
			t.Fatalf("accepted chunk size %d", h.chunkSize)
		}
	})
}

// fuzzPlaintexts are the only plaintexts FuzzOpen may ever see decrypted:
// the seeds are sealed from them, and forging anything else would need the
// key.
var fuzzPlaintexts = [][]byte{nil, pattern(1), pattern(MinChunkSize), pattern(3*MinChunkSize + 7)}

var fuzzAAD = []byte("fuzz artifact")

// FuzzOpen feeds arbitrary artifacts to the Reader: it never panics, never
// hangs, and anything it opens without error is one of the sealed
// plaintexts (mutations must never authenticate).
func FuzzOpen(f *testing.F) {
	k := newMemKMS()
	for _, p := range fuzzPlaintexts {
		sealed := sealArtifact(f, k, memKeyID, fuzzAAD, p, MinChunkSize)
		f.Add(sealed)
		f.Add(sealed[:len(sealed)-1])
		f.Add(append(sealed, sealed[len(sealed)-TagSize:]...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(context.Background(), bytes.NewReader(data), k, fuzzAAD)
		if err != nil {
			return
		}
		got, err := io.ReadAll(io.LimitReader(r, 1<<20))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("read error without the Corrupt class: %v", err)
			}
			return
		}
		for _, p := range fuzzPlaintexts {
			if bytes.Equal(got, p) {
				return
			}
		}
		t.Fatalf("opened a %d-byte plaintext that was never sealed", len(got))
	})
}

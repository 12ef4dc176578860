package envelope

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
)

// Benchmarks report MB/s of plaintext through Seal and Open, including the
// one KMS round trip per artifact (the local file KMS).
var benchSizes = []int{1 << 20, 64 << 20}

func BenchmarkSeal(b *testing.B) {
	k, id := newLocalKMS(b)
	for _, size := range benchSizes {
		plain := pattern(size)
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				w, err := NewWriter(context.Background(), io.Discard, k, id, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := w.Write(plain); err != nil {
					b.Fatal(err)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	k, id := newLocalKMS(b)
	for _, size := range benchSizes {
		sealed := sealArtifact(b, k, id, nil, pattern(size), DefaultChunkSize)
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				r, err := NewReader(context.Background(), bytes.NewReader(sealed), k, nil)
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, r); err != nil || n != int64(size) {
					b.Fatalf("opened %d bytes, %v", n, err)
				}
			}
		})
	}
}

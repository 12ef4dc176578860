package envelope

import (
	"bytes"
	"context"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	"io"
	"testing"

	"github.com/spacesandbox/space/internal/kms"
	"github.com/spacesandbox/space/internal/kms/localkms"
	"github.com/spacesandbox/space/internal/seal"
)

// memKMS is an in-memory kms.KMS with one fixed key, "mem-1", for fuzzing
// and benchmarks where a key file per call would dominate. Its key is a
// constant so that every fuzz worker process can open every corpus entry.
type memKMS struct{ aead cipher.AEAD }

func newMemKMS() *memKMS {
	aead, _ := seal.NewAEAD(bytes.Repeat([]byte{0x5a}, 32))
	return &memKMS{aead}
}

const memKeyID = "mem-1"

func (m *memKMS) WrapKey(_ context.Context, keyID string, dataKey, aad []byte) ([]byte, error) {
	if keyID != memKeyID {
		return nil, &kms.KeyNotFoundError{KeyID: keyID}
	}
	nonce := make([]byte, 12)
	rand.Read(nonce)
	return m.aead.Seal(nonce, nonce, dataKey, aad), nil
}

func (m *memKMS) UnwrapKey(_ context.Context, keyID string, wrapped, aad []byte) ([]byte, error) {
	if keyID != memKeyID {
		return nil, &kms.KeyNotFoundError{KeyID: keyID}
	}
	if len(wrapped) < 12 {
		return nil, kms.ErrInvalidWrappedKey
	}
	key, err := m.aead.Open(nil, wrapped[:12], wrapped[12:], aad)
	if err != nil {
		return nil, kms.ErrInvalidWrappedKey
	}
	return key, nil
}

// newLocalKMS opens a local KMS in a temporary directory with one key for
// tenant t-test.
func newLocalKMS(t testing.TB) (*localkms.KMS, string) {
	t.Helper()
	k, err := localkms.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	id, err := k.CreateKey(context.Background(), "t-test")
	if err != nil {
		t.Fatal(err)
	}
	return k, id
}

// sealArtifact seals plain with the given chunk size and returns the artifact.
func sealArtifact(t testing.TB, k kms.KMS, keyID string, aad, plain []byte, chunkSize int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriterSize(context.Background(), &buf, k, keyID, aad, chunkSize)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := int64(buf.Len()), w.SealedSize(int64(len(plain))); got != want {
		t.Fatalf("sealed %d bytes into %d, SealedSize says %d", len(plain), got, want)
	}
	return buf.Bytes()
}

// open opens an artifact and reads all of it, returning what it yielded
// before any error.
func open(k kms.KMS, aad, sealed []byte) ([]byte, error) {
	r, err := NewReader(context.Background(), bytes.NewReader(sealed), k, aad)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func artifactAAD(name string) []byte {
	return []byte(fmt.Sprintf("tenant=t-test sandbox=s1 snapshot=7 artifact=%s", name))
}

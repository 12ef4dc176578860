package envelope

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/kms"
	"github.com/spacesandbox/space/internal/seal"
)

// Writer seals a stream into the envelope format. Write buffers at most one
// chunk; Close seals the final chunk and must be called (without it the
// artifact reads as truncated). A Writer is not safe for concurrent use.
type Writer struct {
	w         io.Writer
	aead      cipher.AEAD
	headerLen int
	chunkSize int
	nonce     [12]byte
	aad       [sha256Size + 1]byte
	buf       []byte // plaintext of the chunk being filled
	out       []byte // ciphertext scratch
	index     uint64
	err       error // sticky
	closed    bool
}

const sha256Size = 32

// NewWriter starts sealing an artifact onto w with a fresh data key wrapped
// by keyID in k, using DefaultChunkSize. aad must name the artifact (tenant,
// sandbox, snapshot, artifact): Reader must be given the same bytes. The
// header is written before NewWriter returns.
func NewWriter(ctx context.Context, w io.Writer, k kms.KMS, keyID string, aad []byte) (*Writer, error) {
	return NewWriterSize(ctx, w, k, keyID, aad, DefaultChunkSize)
}

// NewWriterSize is NewWriter with a chosen chunk size (MinChunkSize to
// MaxChunkSize plaintext bytes).
func NewWriterSize(ctx context.Context, w io.Writer, k kms.KMS, keyID string, aad []byte, chunkSize int) (*Writer, error) {
	if chunkSize < MinChunkSize || chunkSize > MaxChunkSize {
		return nil, fmt.Errorf("envelope: chunk size %d outside %d..%d: %w", chunkSize, MinChunkSize, MaxChunkSize, errdefs.ErrInvalidArgument)
	}
	if err := kms.ValidKeyID(keyID); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	dataKey := make([]byte, dataKeyLen)
	rand.Read(dataKey)
	defer clear(dataKey)
	wrapped, err := k.WrapKey(ctx, keyID, dataKey, wrapAAD(aad))
	if err != nil {
		return nil, fmt.Errorf("envelope: wrap data key: %w", err)
	}
	if len(wrapped) == 0 || len(wrapped) > kms.MaxWrappedLen {
		return nil, fmt.Errorf("envelope: the KMS returned a %d-byte wrapped key, over %d: %w", len(wrapped), kms.MaxWrappedLen, errdefs.ErrFailedPrecondition)
	}
	h := &header{chunkSize: chunkSize, keyID: keyID, wrapped: wrapped}
	rand.Read(h.noncePrefix[:])
	aead, err := newAEAD(dataKey)
	if err != nil {
		return nil, err
	}
	raw := h.marshal()
	sw := &Writer{
		w:         w,
		aead:      aead,
		headerLen: len(raw),
		chunkSize: chunkSize,
		buf:       make([]byte, 0, chunkSize),
		out:       make([]byte, 0, chunkSize+TagSize),
	}
	copy(sw.nonce[:], h.noncePrefix[:])
	base := chunkAADBase(raw, aad)
	copy(sw.aad[:], base[:])
	if _, err := w.Write(raw); err != nil {
		return nil, fmt.Errorf("envelope: write header: %w", err)
	}
	return sw, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	aead, err := seal.NewAEAD(key)
	if err != nil {
		return nil, fmt.Errorf("envelope: data key: %w: %w", err, ErrCorrupt)
	}
	return aead, nil
}

// Write buffers p, sealing each chunk as soon as it is full and more data
// follows (the last chunk waits for Close, which flags it final).
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.closed {
		return 0, fmt.Errorf("envelope: write after Close: %w", errdefs.ErrFailedPrecondition)
	}
	n := 0
	for len(p) > 0 {
		if len(w.buf) == w.chunkSize {
			if err := w.seal(false); err != nil {
				return n, err
			}
		}
		k := copy(w.buf[len(w.buf):w.chunkSize], p)
		w.buf = w.buf[:len(w.buf)+k]
		p = p[k:]
		n += k
	}
	return n, nil
}

// Close seals the final chunk. It does not close the underlying writer.
// Closing twice is a no-op.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return nil
	}
	w.closed = true
	return w.seal(true)
}

// SealedSize returns how many bytes the artifact will have once plain bytes
// of plaintext were written and the Writer closed: the caller can announce
// the exact size to objstore.Store.Put.
func (w *Writer) SealedSize(plain int64) int64 {
	return sealedSize(w.headerLen, w.chunkSize, plain)
}

// seal encrypts the buffered chunk and writes it.
func (w *Writer) seal(final bool) error {
	if w.index >= maxChunks {
		w.err = fmt.Errorf("envelope: artifact exceeds %d chunks: %w", uint64(maxChunks), errdefs.ErrResourceExhausted)
		return w.err
	}
	binary.BigEndian.PutUint32(w.nonce[noncePrefixLen:], uint32(w.index))
	w.aad[sha256Size] = 0
	if final {
		w.aad[sha256Size] = 1
	}
	w.out = w.aead.Seal(w.out[:0], w.nonce[:], w.buf, w.aad[:])
	clear(w.buf)
	w.buf = w.buf[:0]
	w.index++
	if _, err := w.w.Write(w.out); err != nil {
		w.err = fmt.Errorf("envelope: write chunk %d: %w", w.index-1, err)
		return w.err
	}
	return nil
}

package envelope

import (
	"bufio"
	"context"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/spacesandbox/space/internal/kms"
)

// Reader opens an artifact sealed by Writer. Each chunk is authenticated
// before any of its bytes are returned; the stream ends with io.EOF only
// after the final chunk authenticated, and with an error wrapping ErrCorrupt
// or ErrTruncated otherwise. Errors of the underlying reader are returned
// wrapped with their own class. A Reader is not safe for concurrent use.
type Reader struct {
	r         *bufio.Reader
	aead      cipher.AEAD
	keyID     string
	chunkSize int
	nonce     [12]byte
	aad       [sha256Size + 1]byte
	in        []byte // sealed chunk
	out       []byte // decrypted chunk
	plain     []byte // authenticated plaintext not yet returned (a tail of out)
	index     uint64
	done      bool  // the final chunk authenticated
	err       error // sticky
}

// NewReader reads the header of an artifact from r, has k unwrap its data
// key, and returns a Reader of its plaintext. aad must be the bytes the
// artifact was sealed with. A revoked tenant key gives a
// *kms.KeyRevokedError; a header or wrapped key that does not authenticate
// gives ErrCorrupt.
func NewReader(ctx context.Context, r io.Reader, k kms.KMS, aad []byte) (*Reader, error) {
	h, raw, err := readHeader(r)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	dataKey, err := k.UnwrapKey(ctx, h.keyID, h.wrapped, wrapAAD(aad))
	if errors.Is(err, kms.ErrInvalidWrappedKey) {
		return nil, fmt.Errorf("envelope: unwrap data key with %s: %w: %w", h.keyID, ErrCorrupt, err)
	}
	if err != nil {
		return nil, fmt.Errorf("envelope: unwrap data key: %w", err)
	}
	defer clear(dataKey)
	if len(dataKey) != dataKeyLen {
		return nil, fmt.Errorf("envelope: data key of %d bytes, want %d: %w", len(dataKey), dataKeyLen, ErrCorrupt)
	}
	aead, err := newAEAD(dataKey)
	if err != nil {
		return nil, err
	}
	sr := &Reader{
		// One byte beyond a sealed chunk, to see whether another follows.
		r:         bufio.NewReaderSize(r, h.chunkSize+TagSize+1),
		aead:      aead,
		keyID:     h.keyID,
		chunkSize: h.chunkSize,
		in:        make([]byte, h.chunkSize+TagSize),
		out:       make([]byte, 0, h.chunkSize),
	}
	copy(sr.nonce[:], h.noncePrefix[:])
	base := chunkAADBase(raw, aad)
	copy(sr.aad[:], base[:])
	return sr, nil
}

// KeyID is the tenant key the artifact's data key is wrapped with.
func (r *Reader) KeyID() string { return r.keyID }

// Read returns authenticated plaintext.
func (r *Reader) Read(p []byte) (int, error) {
	for len(r.plain) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.done {
			return 0, io.EOF
		}
		if err := r.next(); err != nil {
			r.err = err
			return 0, err
		}
	}
	n := copy(p, r.plain)
	r.plain = r.plain[n:]
	return n, nil
}

// next reads, authenticates and decrypts the next chunk into r.plain.
func (r *Reader) next() error {
	n, err := io.ReadFull(r.r, r.in)
	last := false
	switch {
	case err == nil:
		// A full chunk: it is the last one if nothing follows.
		_, perr := r.r.Peek(1)
		if perr != nil && !errors.Is(perr, io.EOF) {
			return fmt.Errorf("envelope: read after chunk %d: %w", r.index, perr)
		}
		last = perr != nil
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		if n < TagSize {
			return fmt.Errorf("envelope: chunk %d missing or cut: %w", r.index, ErrTruncated)
		}
		last = true // a short chunk can only be the final one
	default:
		return fmt.Errorf("envelope: read chunk %d: %w", r.index, err)
	}
	if r.index >= maxChunks {
		return fmt.Errorf("envelope: more than %d chunks: %w", uint64(maxChunks), ErrCorrupt)
	}
	sealed := r.in[:n]
	plain, err := r.open(sealed, last)
	if err == nil {
		r.plain, r.done = plain, last
		r.index++
		return nil
	}
	// Tell the two common failures apart for the error message.
	if _, err2 := r.open(sealed, !last); err2 == nil {
		if last {
			return fmt.Errorf("envelope: stream ends after chunk %d, which is not the final one: %w", r.index, ErrTruncated)
		}
		return fmt.Errorf("envelope: data after the final chunk %d: %w", r.index, ErrCorrupt)
	}
	return fmt.Errorf("envelope: chunk %d does not authenticate: %w", r.index, ErrCorrupt)
}

// open authenticates and decrypts one chunk in place.
func (r *Reader) open(sealed []byte, final bool) ([]byte, error) {
	binary.BigEndian.PutUint32(r.nonce[noncePrefixLen:], uint32(r.index))
	r.aad[sha256Size] = 0
	if final {
		r.aad[sha256Size] = 1
	}
	// Not in place: a failed Open may clobber dst, and next retries with
	// the other flag to explain the failure.
	return r.aead.Open(r.out[:0], r.nonce[:], sealed, r.aad[:])
}

// Package envelope owns the encrypted format of everything SPACE writes to
// object storage (BYOK): each artifact is sealed with a fresh random 256-bit
// data key under AES-256-GCM, in chunks, and the data key is stored wrapped
// by the tenant's key through a kms.KMS. Writer seals a stream, Reader opens
// one; neither holds more than a chunk.
//
// Format, version 1 (integers big-endian):
//
//	header:
//	  magic        8 bytes  "SPACEENV"
//	  version      1 byte   1
//	  chunk size   4 bytes  plaintext bytes per chunk, MinChunkSize..MaxChunkSize
//	  nonce prefix 8 bytes  random
//	  key id       2-byte length (1..kms.MaxKeyIDLen) + bytes
//	  wrapped key  2-byte length (1..kms.MaxWrappedLen) + bytes
//	chunks, each: AES-256-GCM(data key, nonce, plaintext, chunk AAD) = ciphertext + 16-byte tag
//	  nonce     = nonce prefix (8) || chunk index (4)
//	  chunk AAD = SHA-256("space-envelope-v1 chunk" || header bytes || artifact aad) || final flag (1 byte)
//
// Every chunk but the last holds exactly chunk size plaintext bytes; the last
// (the only one with final flag 1) holds 0..chunk size, so an empty artifact
// is a header and one empty final chunk.
//
// What the construction detects (tests in tamper_test.go): any change to the
// header (it is hashed into every chunk's AAD, so the first chunk fails),
// to a chunk or a tag; reordered or duplicated chunks (the index is in the
// nonce); truncation at or inside any chunk (the last chunk present lacks the
// final flag, or is cut); data appended after the final chunk; and splicing
// across artifacts or replaying one artifact under another name, because the
// caller's aad — which must name the artifact: tenant, sandbox, snapshot and
// artifact name — is bound both into the wrapped data key and into every
// chunk. Reader authenticates each chunk before returning any of its bytes
// and never reports a clean io.EOF before the final chunk authenticated.
package envelope

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/kms"
)

// Format constants.
const (
	// Version is the format version Writer produces and Reader reads.
	Version = 1
	// DefaultChunkSize is the plaintext size of a chunk unless chosen.
	DefaultChunkSize = 64 << 10
	// MinChunkSize and MaxChunkSize bound the chunk size a header may name.
	MinChunkSize = 64
	MaxChunkSize = 4 << 20
	// TagSize is the authentication tag appended to every chunk.
	TagSize = 16

	magic          = "SPACEENV"
	noncePrefixLen = 8
	dataKeyLen     = 32
	fixedHeaderLen = len(magic) + 1 + 4 + noncePrefixLen
	// MaxHeaderLen bounds a header: the fixed part and two bounded fields.
	MaxHeaderLen = fixedHeaderLen + 2 + kms.MaxKeyIDLen + 2 + kms.MaxWrappedLen
	maxChunks    = 1 << 32 // the chunk index is 4 bytes in the nonce
	chunkAADTag  = "space-envelope-v1 chunk"
	wrapAADTag   = "space-envelope-v1 data key\x00"
)

// Errors. Both are of class errdefs.ErrFailedPrecondition: the artifact
// cannot be used as it is, and retrying will not change that.
var (
	// ErrCorrupt means the artifact failed authentication or is malformed:
	// it was damaged or tampered with, or belongs to another name (aad).
	ErrCorrupt = fmt.Errorf("encrypted artifact is corrupt or was tampered with: %w", errdefs.ErrFailedPrecondition)
	// ErrTruncated means the artifact ends before its final chunk. It
	// matches ErrCorrupt too.
	ErrTruncated = fmt.Errorf("encrypted artifact ends before its final chunk (truncated): %w", ErrCorrupt)
)

// header is the parsed header of an artifact.
type header struct {
	chunkSize   int
	noncePrefix [noncePrefixLen]byte
	keyID       string
	wrapped     []byte
}

// marshal encodes h.
func (h *header) marshal() []byte {
	b := make([]byte, 0, fixedHeaderLen+4+len(h.keyID)+len(h.wrapped))
	b = append(b, magic...)
	b = append(b, Version)
	b = binary.BigEndian.AppendUint32(b, uint32(h.chunkSize))
	b = append(b, h.noncePrefix[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.keyID)))
	b = append(b, h.keyID...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.wrapped)))
	return append(b, h.wrapped...)
}

// readHeader reads and validates a header from r, returning it with its raw
// bytes. Every length is bounded before anything is allocated, so at most
// MaxHeaderLen bytes are read.
func readHeader(r io.Reader) (*header, []byte, error) {
	raw := make([]byte, fixedHeaderLen+2, MaxHeaderLen)
	if err := readFull(r, raw, "header"); err != nil {
		return nil, nil, err
	}
	if string(raw[:len(magic)]) != magic {
		return nil, nil, fmt.Errorf("header: not an encrypted SPACE artifact (bad magic): %w", ErrCorrupt)
	}
	if v := raw[len(magic)]; v != Version {
		return nil, nil, fmt.Errorf("header: format version %d, this SPACE reads version %d: %w", v, Version, errdefs.ErrFailedPrecondition)
	}
	h := &header{chunkSize: int(binary.BigEndian.Uint32(raw[len(magic)+1:]))}
	if h.chunkSize < MinChunkSize || h.chunkSize > MaxChunkSize {
		return nil, nil, fmt.Errorf("header: chunk size %d outside %d..%d: %w", h.chunkSize, MinChunkSize, MaxChunkSize, ErrCorrupt)
	}
	copy(h.noncePrefix[:], raw[len(magic)+5:])
	keyID, raw, err := readField(r, raw, int(binary.BigEndian.Uint16(raw[fixedHeaderLen:])), kms.MaxKeyIDLen, "key id")
	if err != nil {
		return nil, nil, err
	}
	h.keyID = string(keyID)
	if err := kms.ValidKeyID(h.keyID); err != nil {
		return nil, nil, fmt.Errorf("header: %v: %w", err, ErrCorrupt)
	}
	n := len(raw)
	raw = raw[:n+2]
	if err := readFull(r, raw[n:], "header"); err != nil {
		return nil, nil, err
	}
	wrapped, raw, err := readField(r, raw, int(binary.BigEndian.Uint16(raw[n:])), kms.MaxWrappedLen, "wrapped key")
	if err != nil {
		return nil, nil, err
	}
	h.wrapped = wrapped
	return h, raw, nil
}

// readField reads a length-prefixed field of n bytes (1..max) onto raw.
func readField(r io.Reader, raw []byte, n, max int, what string) (field, out []byte, err error) {
	if n < 1 || n > max {
		return nil, nil, fmt.Errorf("header: %s length %d outside 1..%d: %w", what, n, max, ErrCorrupt)
	}
	start := len(raw)
	raw = raw[:start+n]
	if err := readFull(r, raw[start:], "header "+what); err != nil {
		return nil, nil, err
	}
	return raw[start:], raw, nil
}

// readFull fills b from r. Running out of input is ErrTruncated; other read
// errors (an object store going away) keep their own class.
func readFull(r io.Reader, b []byte, what string) error {
	_, err := io.ReadFull(r, b)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%s: %w", what, ErrTruncated)
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}

// chunkAADBase is the 32-byte digest every chunk's AAD starts with.
func chunkAADBase(rawHeader, aad []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(chunkAADTag))
	h.Write(rawHeader)
	h.Write(aad)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// wrapAAD is what the data key's wrapping is bound to.
func wrapAAD(aad []byte) []byte {
	return append([]byte(wrapAADTag), aad...)
}

// sealedSize returns the size of the sealed form of plain bytes, given the
// header length and the chunk size: header, the chunks, one tag per chunk
// (at least one chunk).
func sealedSize(headerLen, chunkSize int, plain int64) int64 {
	chunks := (plain + int64(chunkSize) - 1) / int64(chunkSize)
	if chunks == 0 {
		chunks = 1
	}
	return int64(headerLen) + plain + chunks*TagSize
}

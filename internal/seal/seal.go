// Package seal is SPACE's one way to encrypt small secrets at rest and to
// keep the keys that do it.
//
// A Sealer is AES-256-GCM with a fresh random 96-bit nonce per message; what
// it seals is the nonce followed by the ciphertext and tag, and the caller
// adds its own header (a version byte, a magic string) in front and binds
// what must not move (a sandbox id, a key id) as additional data. At the
// rates SPACE seals (a key per sandbox, a file per credential change),
// random nonces stay far below GCM's 2^32-messages-per-key bound.
//
// Keys live in files that only their owner can read: CreateKeyFile makes one
// once (mode 0600, never replacing a file), ReadKeyFile refuses a file that
// is not a regular file, is a symbolic link, or whose mode lets the group or
// others in, and OpenKeyFile does both for a key the program manages
// itself. ReadPrivateFile and WritePrivateFile are the same checks and an
// atomic, durable replace for files of sealed data.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
)

// KeyLen is the length of a sealing key in bytes: AES-256.
const KeyLen = 32

// NonceLen is the length of the random nonce in front of every sealed
// message.
const NonceLen = 12

// NewAEAD returns AES-256-GCM under key, which must be KeyLen bytes. It is
// for formats that choose their own nonces (the chunked envelope); others
// use a Sealer.
func NewAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != KeyLen {
		return nil, fmt.Errorf("sealing key: %d bytes, want %d: %w", len(key), KeyLen, errdefs.ErrInvalidArgument)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("sealing key: %w", err)
	}
	return cipher.NewGCM(block)
}

// Sealer seals and opens messages under one key. It is safe for concurrent
// use.
type Sealer struct {
	aead cipher.AEAD
}

// New returns a Sealer under key (KeyLen bytes). The caller may clear key
// afterwards.
func New(key []byte) (*Sealer, error) {
	aead, err := NewAEAD(key)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Overhead is how many bytes Seal adds to a message: nonce and tag.
func (s *Sealer) Overhead() int { return NonceLen + s.aead.Overhead() }

// Seal appends to dst a fresh nonce and the sealed plain, bound to aad, and
// returns the result. dst is typically the caller's header.
func (s *Sealer) Seal(dst, plain, aad []byte) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, NonceLen)...)
	rand.Read(dst[n:])
	return s.aead.Seal(dst, dst[n:n+NonceLen], plain, aad)
}

// ErrOpen is the error of Open: a sealed message too short to be one, or
// one that does not authenticate under this key and aad.
var ErrOpen = fmt.Errorf("sealed data does not open: altered, damaged, or sealed under another key: %w", errdefs.ErrFailedPrecondition)

// Open authenticates and decrypts what Seal appended (nonce, ciphertext and
// tag) with the same aad. It returns ErrOpen on every failure: which part
// was wrong is not something to tell an attacker.
func (s *Sealer) Open(sealed, aad []byte) ([]byte, error) {
	if len(sealed) < s.Overhead() {
		return nil, ErrOpen
	}
	plain, err := s.aead.Open(nil, sealed[:NonceLen], sealed[NonceLen:], aad)
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}

// Derive returns a key derived from the Sealer's key for purpose label: the
// SHA-256 of label sealed with label as additional data under the all-zero
// nonce. That nonce is used for nothing else (Seal draws random 96-bit
// nonces), and sealing the same label under it always gives the same bytes,
// so the result is stable across restarts and processes sharing the key,
// and tells nothing about the key.
func (s *Sealer) Derive(label string) [sha256.Size]byte {
	nonce := make([]byte, NonceLen)
	return sha256.Sum256(s.aead.Seal(nil, nonce, []byte(label), []byte(label)))
}

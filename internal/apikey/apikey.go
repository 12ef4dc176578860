// Package apikey mints, parses and verifies SPACE API keys.
//
// A key is one string the caller sends as a bearer token:
//
//	space_k-<16 [a-z0-9]>_<64 hex>
//	      '---- key id ---' '-- secret (256 bits) --'
//
// The "space_" prefix makes a leaked key recognisable to secret scanners and
// to people. The key id is not secret: the store finds the key's row by it and
// the API shows it (with the prefix) so a user can tell keys apart. The secret
// is 32 bytes from crypto/rand, shown once at creation; the store keeps only
// its SHA-256 hash.
//
// No slow password hash (bcrypt, argon2) is needed: those exist to make
// guessing low-entropy human passwords expensive, and a 256-bit random secret
// cannot be guessed, so a single fast hash is as strong and keeps every
// authenticated request cheap. The hash covers the key id as well, so a row's
// hash cannot be paired with another id.
package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// Prefix starts every SPACE API key.
const Prefix = "space_"

const (
	secretBytes = 32
	secretHex   = 2 * secretBytes
	// keyLen is the exact length of a well-formed key: prefix, a 18-byte key
	// id, '_', and the hex secret.
	keyLen    = len(Prefix) + 18 + 1 + secretHex
	hashLabel = "space-apikey-v1\x00"
)

// Key is a parsed or freshly minted API key.
type Key struct {
	// ID is the key's lookup id ("k-…"), not secret.
	ID     string
	secret [secretBytes]byte
}

// New mints a key with a fresh id and a fresh 256-bit secret.
func New() Key {
	k := Key{ID: sandbox.NewKeyID()}
	// crypto/rand.Read does not fail on Linux; it aborts the program rather
	// than return weak bytes.
	rand.Read(k.secret[:])
	return k
}

// String returns the whole key, secret included: the bearer token to hand to
// the user once.
func (k Key) String() string {
	return Prefix + k.ID + "_" + hex.EncodeToString(k.secret[:])
}

// Display returns the non-secret part of the key ("space_k-…"), fit for lists
// and logs.
func (k Key) Display() string { return Display(k.ID) }

// Display returns the non-secret prefix shown for the key with the given id.
func Display(id string) string { return Prefix + id }

// Hash returns the value the store keeps for the key: the hex SHA-256 of a
// version label, the key id and the secret.
func (k Key) Hash() string {
	h := sha256.New()
	h.Write([]byte(hashLabel))
	h.Write([]byte(k.ID))
	h.Write([]byte{0})
	h.Write(k.secret[:])
	return hex.EncodeToString(h.Sum(nil))
}

// Matches reports, in constant time, whether the key's hash equals stored (a
// value returned by Hash).
func (k Key) Matches(stored string) bool {
	got := k.Hash()
	return subtle.ConstantTimeCompare([]byte(got), []byte(stored)) == 1
}

// Parse reads an API key from untrusted input (an Authorization header). It
// never echoes the input back: errors are of class ErrUnauthenticated and say
// only what shape was expected.
func Parse(s string) (Key, error) {
	bad := func(why string) (Key, error) {
		return Key{}, fmt.Errorf("api key: %s (want %sk-…_<64 hex>): %w", why, Prefix, errdefs.ErrUnauthenticated)
	}
	if len(s) != keyLen {
		return bad("wrong length")
	}
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok {
		return bad("missing " + Prefix + " prefix")
	}
	id, secret, ok := strings.Cut(rest, "_")
	if !ok || !sandbox.ValidKeyID(id) {
		return bad("malformed key id")
	}
	var k Key
	if len(secret) != secretHex || !lowerHex(secret) {
		return bad("malformed secret")
	}
	if _, err := hex.Decode(k.secret[:], []byte(secret)); err != nil {
		return bad("malformed secret")
	}
	k.ID = id
	return k, nil
}

// lowerHex reports whether s is lowercase hex, so every key has exactly one
// spelling.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

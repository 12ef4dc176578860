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
//
// A key can also be minted in E2B's shape, for E2B SDKs that check it
// (^e2b_[0-9a-f]+$):
//
//	e2b_<8 hex><32 hex>
//	    '- id -''- secret (128 bits) -'
//
// The first 8 hex digits are the key id (its store id is
// "k-" + E2BIDMark + those digits), so it is found without a scan as a
// SPACE key is; the other 32 are a 128-bit secret from crypto/rand, hashed
// under its own label, compared in constant time and revoked as any key.
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

// E2BPrefix starts every API key minted in E2B's shape (NewE2B).
const E2BPrefix = "e2b_"

// E2BIDMark starts the 16-character id of a key in E2B's shape, before the
// 8 hex digits the key itself carries ("k-e2b00000" + 8 hex).
const E2BIDMark = "e2b00000"

const (
	e2bIDBytes     = 4
	e2bSecretBytes = 16
	// e2bKeyLen: "e2b_", then 40 hex (the id's 8 and the secret's 32).
	e2bKeyLen    = len(E2BPrefix) + 2*(e2bIDBytes+e2bSecretBytes)
	e2bHashLabel = "space-apikey-e2b-v1\x00"
)

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
	e2b    bool // E2B's shape: the secret is secret[:e2bSecretBytes]
}

// New mints a key with a fresh id and a fresh 256-bit secret.
func New() Key {
	k := Key{ID: sandbox.NewKeyID()}
	for strings.HasPrefix(k.ID, "k-"+E2BIDMark) { // those ids are E2B-shaped keys'
		k.ID = sandbox.NewKeyID()
	}
	// crypto/rand.Read does not fail on Linux; it aborts the program rather
	// than return weak bytes.
	rand.Read(k.secret[:])
	return k
}

// NewE2B mints a key in E2B's shape ("e2b_" + 40 hex): a fresh 32-bit id
// and a fresh 128-bit secret. Its 2^32 ids can collide: the caller records
// it with CreateAPIKey, which refuses an id in use, and mints again.
func NewE2B() Key {
	var id [e2bIDBytes]byte
	rand.Read(id[:])
	k := Key{ID: e2bKeyID(hex.EncodeToString(id[:])), e2b: true}
	rand.Read(k.secret[:e2bSecretBytes])
	return k
}

// e2bKeyID is the store id of the E2B-shaped key whose id digits are h.
func e2bKeyID(h string) string { return "k-" + E2BIDMark + h }

// E2B reports whether k is in E2B's shape.
func (k Key) E2B() bool { return k.e2b }

// String returns the whole key, secret included: the bearer token to hand to
// the user once.
func (k Key) String() string {
	if k.e2b {
		return E2BPrefix + strings.TrimPrefix(k.ID, "k-"+E2BIDMark) + hex.EncodeToString(k.secret[:e2bSecretBytes])
	}
	return Prefix + k.ID + "_" + hex.EncodeToString(k.secret[:])
}

// Display returns the non-secret part of the key ("space_k-…", or
// "e2b_<8 hex>…"), fit for lists and logs.
func (k Key) Display() string { return Display(k.ID) }

// Display returns the non-secret prefix shown for the key with the given id.
func Display(id string) string {
	if h, ok := strings.CutPrefix(id, "k-"+E2BIDMark); ok && len(h) == 2*e2bIDBytes {
		return E2BPrefix + h + "…"
	}
	return Prefix + id
}

// IDOf returns the key id a user names a key by: its id ("k-…"), or the
// non-secret part Display shows ("space_k-…", "e2b_<8 hex>", with or
// without the trailing "…").
func IDOf(s string) string {
	if h, ok := strings.CutPrefix(strings.TrimSuffix(s, "…"), E2BPrefix); ok && len(h) == 2*e2bIDBytes {
		return e2bKeyID(h)
	}
	return strings.TrimPrefix(s, Prefix)
}

// Hash returns the value the store keeps for the key: the hex SHA-256 of a
// version label (one per shape), the key id and the secret.
func (k Key) Hash() string {
	h := sha256.New()
	secret := k.secret[:]
	if k.e2b {
		h.Write([]byte(e2bHashLabel))
		secret = k.secret[:e2bSecretBytes]
	} else {
		h.Write([]byte(hashLabel))
	}
	h.Write([]byte(k.ID))
	h.Write([]byte{0})
	h.Write(secret)
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
		return Key{}, fmt.Errorf("api key: %s (want %sk-…_<64 hex> or %s<40 hex>): %w", why, Prefix, E2BPrefix, errdefs.ErrUnauthenticated)
	}
	if rest, ok := strings.CutPrefix(s, E2BPrefix); ok {
		if len(s) != e2bKeyLen {
			return bad("wrong length")
		}
		if !lowerHex(rest) {
			return bad("malformed key")
		}
		k := Key{ID: e2bKeyID(rest[:2*e2bIDBytes]), e2b: true}
		if _, err := hex.Decode(k.secret[:e2bSecretBytes], []byte(rest[2*e2bIDBytes:])); err != nil {
			return bad("malformed secret")
		}
		return k, nil
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

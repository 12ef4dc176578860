package capability

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// KeyID derives a key's id from its public half.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// LoadOrCreateSigner reads the control plane's signing key from path (the
// hex seed, mode 0600), creating it on first use.
func LoadOrCreateSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		seed := make([]byte, ed25519.SeedSize)
		rand.Read(seed)
		if err := os.WriteFile(path, []byte(hex.EncodeToString(seed)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("capability: write signing key %s: %w", path, err)
		}
		b = []byte(hex.EncodeToString(seed))
	} else if err != nil {
		return nil, fmt.Errorf("capability: read signing key %s: %w", path, err)
	}
	seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("capability: %s does not hold an Ed25519 seed", path)
	}
	key := ed25519.NewKeyFromSeed(seed)
	return NewSigner(KeyID(key.Public().(ed25519.PublicKey)), key)
}

// KeySetFor is the verification bundle of the given signers' keys.
func KeySetFor(version uint64, signers ...*Signer) *KeySet {
	ks := &KeySet{Version: version, Keys: map[string]ed25519.PublicKey{}}
	for _, s := range signers {
		ks.Keys[s.KeyID()] = s.PublicKey()
	}
	return ks
}

// MarshalJSON encodes a key set with its keys as hex.
func (ks KeySet) MarshalJSON() ([]byte, error) {
	keys := map[string]string{}
	for id, k := range ks.Keys {
		keys[id] = hex.EncodeToString(k)
	}
	return json.Marshal(struct {
		Version uint64            `json:"version"`
		Keys    map[string]string `json:"keys"`
	}{ks.Version, keys})
}

// UnmarshalJSON decodes and checks a key set: every key is 32 bytes, the
// canonical encoding of a curve point not of small order.
func (ks *KeySet) UnmarshalJSON(b []byte) error {
	var w struct {
		Version uint64            `json:"version"`
		Keys    map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	raw := make(map[string][]byte, len(w.Keys))
	for id, h := range w.Keys {
		k, err := hex.DecodeString(h)
		if err != nil {
			return fmt.Errorf("capability: bad key %q in key set", id)
		}
		raw[id] = k
	}
	parsed, err := ParseKeySet(w.Version, raw)
	if err != nil {
		return err
	}
	*ks = *parsed
	return nil
}

// ParseKeySet checks and returns the key set of version and keys (each an
// Ed25519 public key by its id), as it travels in a heartbeat answer: every
// key is 32 bytes, the canonical encoding of a curve point not of small
// order, under a non-empty id of at most MaxFieldBytes, and there are at
// most 16. Nothing of a refused key set is returned.
func ParseKeySet(version uint64, keys map[string][]byte) (*KeySet, error) {
	if len(keys) > 16 {
		return nil, errors.New("capability: key set of more than 16 keys")
	}
	out := map[string]ed25519.PublicKey{}
	for id, k := range keys {
		if len(k) != ed25519.PublicKeySize || id == "" || len(id) > MaxFieldBytes {
			return nil, fmt.Errorf("capability: bad key %q in key set", id)
		}
		if !validPublicKey(k) {
			return nil, fmt.Errorf("capability: key %q in key set is not a usable Ed25519 public key (off the curve, non-canonical or of small order)", id)
		}
		out[id] = ed25519.PublicKey(bytes.Clone(k))
	}
	return &KeySet{Version: version, Keys: out}, nil
}

package localkms

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/kms"
	"github.com/spacesandbox/space/internal/seal"
)

// The key file. One JSON document holds every key; it is replaced whole
// (temporary file, fsync, rename, fsync of the directory) on every change.
const (
	keyFileName     = "keys.json"
	lockFileName    = "keys.lock"
	keyFileVersion  = 1
	maxKeyFileBytes = 16 << 20
	materialLen     = 32
	keyIDPrefix     = "kek-"
	maxTenantLen    = 128
)

// keyFile is the JSON document in keys.json.
type keyFile struct {
	Version int         `json:"version"`
	Keys    []fileEntry `json:"keys"`
}

// fileEntry is one key. Material is set while the key is active; revoking
// it removes the material for good and sets Revoked.
type fileEntry struct {
	ID       string     `json:"id"`
	Tenant   string     `json:"tenant"`
	Created  time.Time  `json:"created"`
	Revoked  *time.Time `json:"revoked,omitempty"`
	Material []byte     `json:"material,omitempty"` // base64 in JSON
}

// parseKeyFile decodes and validates a key file's bytes; nil is the empty
// key ring.
func parseKeyFile(data []byte) (*keyFile, error) {
	if data == nil {
		return &keyFile{Version: keyFileVersion}, nil
	}
	var kf keyFile
	if err := json.Unmarshal(data, &kf); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if kf.Version != keyFileVersion {
		return nil, fmt.Errorf("version %d, want %d (a newer SPACE wrote it?)", kf.Version, keyFileVersion)
	}
	seen := make(map[string]bool, len(kf.Keys))
	for i, e := range kf.Keys {
		if err := kms.ValidKeyID(e.ID); err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		if seen[e.ID] {
			return nil, fmt.Errorf("key %s appears twice", e.ID)
		}
		seen[e.ID] = true
		if err := validTenant(e.Tenant); err != nil {
			return nil, fmt.Errorf("key %s: %w", e.ID, err)
		}
		switch {
		case e.Revoked == nil && len(e.Material) != materialLen:
			return nil, fmt.Errorf("key %s: active with %d bytes of material, want %d", e.ID, len(e.Material), materialLen)
		case e.Revoked != nil && len(e.Material) != 0:
			return nil, fmt.Errorf("key %s: revoked but its material is still present", e.ID)
		}
	}
	return &kf, nil
}

// validTenant checks a tenant name: 1 to 128 bytes of [a-z0-9._-].
func validTenant(t string) error {
	if len(t) == 0 || len(t) > maxTenantLen {
		return fmt.Errorf("tenant %.64q: want 1 to %d bytes: %w", t, maxTenantLen, errdefs.ErrInvalidArgument)
	}
	for _, c := range []byte(t) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("tenant %.64q: want [a-z0-9._-]: %w", t, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// newKeyID returns a fresh key id: "kek-" and 32 hex digits.
func newKeyID() string {
	var b [16]byte
	rand.Read(b[:])
	return keyIDPrefix + hex.EncodeToString(b[:])
}

// readKeyFile reads the bytes of keys.json in dir; a missing file reads as
// nil (an empty key ring). The file must be a regular file (never a link)
// that only its owner can read (seal.ReadPrivateFile).
func readKeyFile(dir string) ([]byte, error) {
	data, err := seal.ReadPrivateFile(filepath.Join(dir, keyFileName), maxKeyFileBytes)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	return data, nil
}

// writeKeyFile replaces keys.json atomically and durably.
func writeKeyFile(dir string, kf *keyFile) error {
	data, err := json.MarshalIndent(kf, "", "  ")
	if err != nil {
		return fmt.Errorf("encode key file: %w", err)
	}
	defer clear(data)
	if err := seal.WritePrivateFile(filepath.Join(dir, keyFileName), data); err != nil {
		return fmt.Errorf("key file: %w", err)
	}
	return nil
}

package localstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/seal"
)

// The store file: magic (8) | key fingerprint (8) | nonce (12) | AES-256-GCM
// ciphertext of the JSON document, with magic and fingerprint as additional
// data. The fingerprint (a hash of the key, not the key) tells a wrong key
// file apart from a damaged store.
const (
	magic        = "SPCRED01"
	fpLen        = 8
	headerLen    = len(magic) + fpLen + seal.NonceLen
	maxFileBytes = 64 << 20
	docVersion   = 1
)

// document is the plaintext: every credential, secrets included.
type document struct {
	Version     int      `json:"version"`
	Credentials []record `json:"credentials"`
}

// record is a credential as stored; unlike credentials.Credential it
// carries the secret (base64 in JSON).
type record struct {
	ID           string                `json:"id"`
	Scope        credentials.Scope     `json:"scope"`
	Name         string                `json:"name"`
	Secret       []byte                `json:"secret"`
	Injection    credentials.Injection `json:"injection"`
	AllowedHosts []string              `json:"allowed_hosts"`
	ExpiresAt    time.Time             `json:"expires_at,omitzero"`
	RateLimit    int                   `json:"rate_limit,omitempty"`
}

// toRecord copies c, so zeroing the document leaves the caller's secret alone.
func toRecord(c *credentials.Credential) record {
	cl := c.Clone()
	c = &cl
	return record{ID: c.ID, Scope: c.Scope, Name: c.Name, Secret: c.Secret, Injection: c.Injection,
		AllowedHosts: c.AllowedHosts, ExpiresAt: c.ExpiresAt, RateLimit: c.RateLimit}
}

func (r *record) credential() credentials.Credential {
	return credentials.Credential{ID: r.ID, Scope: r.Scope, Name: r.Name, Secret: r.Secret, Injection: r.Injection,
		AllowedHosts: r.AllowedHosts, ExpiresAt: r.ExpiresAt, RateLimit: r.RateLimit}
}

// fingerprint identifies a key without revealing it.
func fingerprint(key []byte) []byte {
	h := sha256.New()
	h.Write([]byte("space-credentials-localstore-key-v1\x00"))
	h.Write(key)
	return h.Sum(nil)[:fpLen]
}

// sealDoc encrypts the document's JSON.
func sealDoc(s *seal.Sealer, fp []byte, plain []byte) []byte {
	header := make([]byte, 0, headerLen+len(plain)+s.Overhead())
	header = append(append(header, magic...), fp...)
	return s.Seal(header, plain, header)
}

// openDoc authenticates and decrypts a store file's bytes. Every failure is
// ErrFailedPrecondition: the store cannot be used as it is.
func openDoc(s *seal.Sealer, fp []byte, data []byte) ([]byte, error) {
	if len(data) < len(magic)+fpLen+s.Overhead() || string(data[:len(magic)]) != magic {
		return nil, fmt.Errorf("not a credential store (bad header): %w", errdefs.ErrFailedPrecondition)
	}
	if got := data[len(magic) : len(magic)+fpLen]; !bytes.Equal(got, fp) {
		return nil, fmt.Errorf("encrypted under another key (fingerprint %x, key file's %x); use the key file it was created with: %w",
			got, fp, errdefs.ErrFailedPrecondition)
	}
	header := data[:len(magic)+fpLen]
	plain, err := s.Open(data[len(header):], header)
	if err != nil {
		return nil, fmt.Errorf("does not authenticate: the file was altered or damaged; restore it from a backup: %w", errdefs.ErrFailedPrecondition)
	}
	return plain, nil
}

// decodeDocument parses and validates decrypted JSON. Every credential must
// validate and ids must be unique.
func decodeDocument(plain []byte) (*document, error) {
	var doc document
	if err := json.Unmarshal(plain, &doc); err != nil {
		return nil, fmt.Errorf("decode: %w: %w", err, errdefs.ErrFailedPrecondition)
	}
	if doc.Version != docVersion {
		return nil, fmt.Errorf("version %d, want %d (written by a newer SPACE?): %w", doc.Version, docVersion, errdefs.ErrFailedPrecondition)
	}
	seen := make(map[string]bool, len(doc.Credentials))
	for i := range doc.Credentials {
		c := doc.Credentials[i].credential()
		if err := c.Validate(); err != nil {
			doc.zero()
			return nil, fmt.Errorf("credential %d: %w: %w", i, err, errdefs.ErrFailedPrecondition)
		}
		if seen[c.ID] {
			doc.zero()
			return nil, fmt.Errorf("credential %s appears twice: %w", c.ID, errdefs.ErrFailedPrecondition)
		}
		seen[c.ID] = true
	}
	return &doc, nil
}

func (d *document) zero() {
	for i := range d.Credentials {
		clear(d.Credentials[i].Secret)
	}
}

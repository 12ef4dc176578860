// Package kms owns the key management contract of BYOK ("bring your own
// key"): a tenant's key-encryption keys live in a key management service and
// never leave it; callers hand it small data keys to wrap (encrypt) and
// unwrap (decrypt). internal/envelope uses it to protect a fresh data key per
// artifact written to object storage.
//
// Providers: kms/localkms (key material in a local 0600 file). A cloud KMS
// provider implements the same KMS interface.
//
// Revoking a tenant key is how a tenant withdraws SPACE's access to its
// data: unwrapping under a revoked key fails with a *KeyRevokedError (class
// errdefs.ErrFailedPrecondition, sentinel ErrKeyRevoked), which callers
// surface as "restore refused".
package kms

import (
	"context"
	"errors"
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
)

// KMS wraps and unwraps data keys under a named key-encryption key. The aad
// (additional authenticated data) binds a wrapped key to its use: unwrapping
// with a different aad fails. Implementations are safe for concurrent use.
type KMS interface {
	// WrapKey encrypts dataKey (1 to MaxDataKeyLen bytes) under keyID.
	WrapKey(ctx context.Context, keyID string, dataKey, aad []byte) ([]byte, error)
	// UnwrapKey decrypts what WrapKey returned for the same keyID and aad.
	// A revoked key gives a *KeyRevokedError, an unknown one a
	// *KeyNotFoundError, a wrapped key that does not authenticate (tampered,
	// another key's, another aad) ErrInvalidWrappedKey.
	UnwrapKey(ctx context.Context, keyID string, wrapped, aad []byte) ([]byte, error)
}

// Limits every provider enforces, and every reader of untrusted key ids and
// wrapped keys can bound its input by.
const (
	MaxKeyIDLen   = 256
	MaxDataKeyLen = 64
	MaxWrappedLen = 1024
)

// Sentinels for errors.Is. Each is also of an errdefs class.
var (
	// ErrKeyRevoked is matched by every *KeyRevokedError.
	ErrKeyRevoked = errors.New("tenant key revoked")
	// ErrKeyNotFound is matched by every *KeyNotFoundError.
	ErrKeyNotFound = errors.New("tenant key not found")
	// ErrInvalidWrappedKey means a wrapped key did not authenticate: it was
	// altered, or belongs to another key or another aad.
	ErrInvalidWrappedKey = fmt.Errorf("wrapped data key does not authenticate under this key and context (altered, or another artifact's): %w",
		errdefs.ErrFailedPrecondition)
)

// KeyRevokedError reports use of a revoked key. It is of class
// errdefs.ErrFailedPrecondition and matches ErrKeyRevoked.
type KeyRevokedError struct {
	// KeyID is the revoked key.
	KeyID string
}

// Error says which key was revoked and what that means for the data.
func (e *KeyRevokedError) Error() string {
	return fmt.Sprintf("tenant key %s was revoked: the data encrypted with it cannot be decrypted", e.KeyID)
}

// Unwrap returns the sentinel and the class.
func (e *KeyRevokedError) Unwrap() []error {
	return []error{ErrKeyRevoked, errdefs.ErrFailedPrecondition}
}

// KeyNotFoundError reports a key id the KMS does not know. It is of class
// errdefs.ErrNotFound and matches ErrKeyNotFound.
type KeyNotFoundError struct {
	// KeyID is the unknown key.
	KeyID string
}

// Error says which key is unknown.
func (e *KeyNotFoundError) Error() string {
	return fmt.Sprintf("tenant key %s does not exist: the data encrypted with it cannot be decrypted", e.KeyID)
}

// Unwrap returns the sentinel and the class.
func (e *KeyNotFoundError) Unwrap() []error {
	return []error{ErrKeyNotFound, errdefs.ErrNotFound}
}

// ValidKeyID checks the shape of a key id: 1 to MaxKeyIDLen bytes of
// [A-Za-z0-9._:/+=@-], which covers local ids and cloud KMS key ARNs and
// aliases. The error is ErrInvalidArgument.
func ValidKeyID(id string) error {
	if len(id) == 0 || len(id) > MaxKeyIDLen {
		return fmt.Errorf("key id %.64q: want 1 to %d bytes: %w", id, MaxKeyIDLen, errdefs.ErrInvalidArgument)
	}
	for i, c := range []byte(id) {
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' ||
			c == ':' || c == '/' || c == '+' || c == '=' || c == '@' || c == '-'
		if !ok {
			return fmt.Errorf("key id %.64q: byte %d (%q) not allowed: %w", id, i, c, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// Package capability mints and verifies execution-bound capabilities: short
// lived, Ed25519-signed statements by the control plane that one request may
// be served by one exact execution of one sandbox, for named operations (and,
// for ServicePort traffic, one port and protocol). Receivers verify the
// signature and expiry with public keys only, then compare the identity with
// the execution they have installed (Compare): a valid, unexpired token for
// another incarnation is still refused.
//
// Wire format (version 1), all integers unsigned varints unless noted:
//
//	version byte (1)
//	key id, sandbox, node, substrate, activation, pod uid   (each: length, bytes)
//	generation, ops, port
//	protocol                                                (length, bytes)
//	issued-at, expires-at                                   (Unix seconds)
//	signature                                               (64 bytes, Ed25519 over all of the above)
//
// A token is at most MaxTokenBytes; every string at most MaxFieldBytes.
package capability

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Version is the token format this package writes.
const Version = 1

// Header carries a capability (Encode) on HTTP requests between hops.
const Header = "X-Space-Capability"

// Lifetime is how long a capability is valid; Skew is the clock difference
// tolerated at both ends of its window: a receiver accepts a capability from
// IssuedAt-Skew to ExpiresAt+Skew by its own wall clock, and a receiver whose
// clock differs from the control plane's by more than Skew refuses all of
// them (internal/node/clock.go).
const (
	Lifetime = 120 * time.Second
	Skew     = 15 * time.Second
)

// Bounds on untrusted input.
const (
	MaxTokenBytes = 1024
	MaxFieldBytes = 128
)

// Op is a set of operations a capability allows.
type Op uint32

// The operations.
const (
	OpExec        Op = 1 << iota // processes: start, input, signals, PTY
	OpFiles                      // file reads, writes, listing, watching
	OpLifecycle                  // pause, resume, snapshot, stop, delete of the execution
	OpServicePort                // traffic to one guest port through the gateway
	opLast
)

// Valid reports whether o names only known operations and at least one.
func (o Op) Valid() bool { return o != 0 && o&^(opLast-1) == 0 }

// Identity names one execution of one sandbox: the route a request is bound to.
type Identity struct {
	// Sandbox is the stable id of the logical sandbox.
	Sandbox string
	// Generation counts executions of the sandbox; it grows with every new one.
	Generation uint64
	// Node is the worker the execution runs on.
	Node string
	// Substrate is the runtime ("vm", "ns").
	Substrate string
	// Activation identifies one start attempt of the execution.
	Activation string
	// PodUID is reserved for Kubernetes placement; empty elsewhere.
	PodUID string
}

// Capability is a verified (or to-be-signed) token's content.
type Capability struct {
	KeyID string
	Identity
	Ops Op
	// Port and Protocol bind an OpServicePort capability to one guest port.
	Port     uint16
	Protocol string
	// IssuedAt and ExpiresAt are whole seconds.
	IssuedAt  time.Time
	ExpiresAt time.Time
}

// Errors of Verify. All mean Deny.
var (
	ErrMalformed    = errors.New("capability: malformed token")
	ErrUnknownKey   = errors.New("capability: unknown signing key")
	ErrBadSignature = errors.New("capability: bad signature")
	ErrExpired      = errors.New("capability: expired")
	// ErrNotYetValid refuses a capability issued later than now+Skew: a
	// signer whose clock runs ahead, or a receiver whose clock runs behind.
	ErrNotYetValid = errors.New("capability: not yet valid (issued in the future)")
)

// Signer mints capabilities. Only the control plane holds one.
type Signer struct {
	keyID string
	key   ed25519.PrivateKey
	now   func() time.Time
}

// NewSigner returns a signer that signs with key under keyID.
func NewSigner(keyID string, key ed25519.PrivateKey) (*Signer, error) {
	if keyID == "" || len(keyID) > MaxFieldBytes {
		return nil, fmt.Errorf("capability: key id must be 1-%d bytes", MaxFieldBytes)
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("capability: not an Ed25519 private key")
	}
	return &Signer{keyID: keyID, key: key, now: time.Now}, nil
}

// WithClock returns a signer with s's key that mints by the clock now.
// Tests use it to mint at a chosen time (a receiver's window boundaries, a
// signer running ahead); the control plane mints by its wall clock.
func (s *Signer) WithClock(now func() time.Time) *Signer {
	c := *s
	c.now = now
	return &c
}

// KeyID is the id of the signer's key, as verifiers find it in a KeySet.
func (s *Signer) KeyID() string { return s.keyID }

// PublicKey is the signer's verification key.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Mint issues a capability for id allowing ops, valid for Lifetime from now.
// port and protocol are required with OpServicePort and refused without it.
func (s *Signer) Mint(id Identity, ops Op, port uint16, protocol string) ([]byte, error) {
	return s.MintUntil(id, ops, port, protocol, time.Time{})
}

// MintUntil is Mint with an earlier expiry: until (zero: the full Lifetime),
// never later than Lifetime from now. A repaired route keeps the expiry of
// the route it replaces: repair is not a renewal of the authorization.
func (s *Signer) MintUntil(id Identity, ops Op, port uint16, protocol string, until time.Time) ([]byte, error) {
	if !ops.Valid() {
		return nil, fmt.Errorf("capability: invalid operations %#x", uint32(ops))
	}
	if (ops&OpServicePort != 0) != (port != 0) || (port == 0) != (protocol == "") {
		return nil, errors.New("capability: a port and protocol go with OpServicePort, and only with it")
	}
	now := s.now().Truncate(time.Second)
	expires := now.Add(Lifetime)
	if !until.IsZero() && until.Before(expires) {
		if !until.After(now) {
			return nil, errors.New("capability: the expiry asked for has passed")
		}
		expires = until.Truncate(time.Second)
		if !expires.After(now) {
			expires = now.Add(time.Second)
		}
	}
	c := Capability{KeyID: s.keyID, Identity: id, Ops: ops, Port: port, Protocol: protocol, IssuedAt: now, ExpiresAt: expires}
	msg, err := encode(&c)
	if err != nil {
		return nil, err
	}
	return append(msg, ed25519.Sign(s.key, msg)...), nil
}

// KeySet is a versioned bundle of verification keys pushed by the control
// plane to nodes and gateways. A newer version replaces an older one.
type KeySet struct {
	Version uint64
	Keys    map[string]ed25519.PublicKey
}

// Verify checks a token's format, signature and validity window at now and
// returns its content. The window is [IssuedAt-Skew, ExpiresAt+Skew], and
// ExpiresAt-IssuedAt is positive and at most Lifetime. A key that is not a
// usable Ed25519 key (wrong length, small order) verifies nothing. It does
// not compare the identity: see Compare.
func Verify(token []byte, keys *KeySet, now time.Time) (*Capability, error) {
	if len(token) > MaxTokenBytes || len(token) < 1+ed25519.SignatureSize {
		return nil, ErrMalformed
	}
	msg, sig := token[:len(token)-ed25519.SignatureSize], token[len(token)-ed25519.SignatureSize:]
	c, err := decode(msg)
	if err != nil {
		return nil, err
	}
	pub, ok := keys.Keys[c.KeyID]
	if !ok || len(pub) != ed25519.PublicKeySize {
		return nil, ErrUnknownKey
	}
	if smallOrder(pub) {
		// A key set made in code rather than parsed (UnmarshalJSON refuses
		// these): the identity point verifies any message.
		return nil, ErrUnknownKey
	}
	if !ed25519.Verify(pub, msg, sig) {
		return nil, ErrBadSignature
	}
	if err := checkWindow(c, now); err != nil {
		return nil, err
	}
	return c, nil
}

// checkWindow checks c's lifetime and that now is inside its validity window.
func checkWindow(c *Capability, now time.Time) error {
	if c.ExpiresAt.Sub(c.IssuedAt) > Lifetime || !c.ExpiresAt.After(c.IssuedAt) {
		return fmt.Errorf("%w: lifetime %s", ErrMalformed, c.ExpiresAt.Sub(c.IssuedAt))
	}
	if now.Before(c.IssuedAt.Add(-Skew)) {
		return fmt.Errorf("%w: issued at %s, %s after now", ErrNotYetValid,
			c.IssuedAt.UTC().Format(time.RFC3339), c.IssuedAt.Sub(now).Round(time.Second))
	}
	if now.After(c.ExpiresAt.Add(Skew)) {
		return ErrExpired
	}
	return nil
}

// Encode returns a token as text for an HTTP header.
func Encode(token []byte) string { return base64.RawURLEncoding.EncodeToString(token) }

// Decode parses the text form of a token: unpadded base64url, strictly (the
// unused bits of the last character must be zero, and no line breaks), so
// one token has exactly one text form.
func Decode(s string) ([]byte, error) {
	if len(s) > base64.RawURLEncoding.EncodedLen(MaxTokenBytes) || strings.ContainsAny(s, "\r\n") {
		// The decoder skips CR and LF even when strict.
		return nil, ErrMalformed
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, ErrMalformed
	}
	return b, nil
}

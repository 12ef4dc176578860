package server

import (
	"context"
	"fmt"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/seal"
)

// Every sandbox has its own interception CA (ARCHITECTURE.md §7): the guest
// trusts its certificate, and the gateway of the node running the sandbox
// mints leaf certificates with it for the hosts that have a credential rule.
// internal/service makes it when the sandbox is created (a fork gets a new
// one; a sandbox recorded before CAs existed gets one at its next start) and
// keeps it with the sandbox record; every StartExecution carries it. Its key
// is sealed here.
//
// Sealing the key at rest: the CA key is sealed with AES-256-GCM under a
// server key read from a file (DATA/ca-seal.key, 0600), with the sandbox id
// as additional data so a sealed key copied to another sandbox's row does
// not open. The tenants' KMS keys (internal/kms) were the other candidate;
// they are not used because revoking a tenant key is meant to withdraw
// access to the tenant's snapshots, not to stop its sandboxes from starting,
// and because the reconciler, which builds StartExecution, holds no KMS.

// caSealVersion is the first byte of a sealed CA key.
const caSealVersion = 1

// CASealer seals and opens sandboxes' CA keys. It is safe for concurrent use.
type CASealer struct {
	s *seal.Sealer
}

// NewCASealer returns a sealer under key (32 bytes).
func NewCASealer(key []byte) (*CASealer, error) {
	s, err := seal.New(key)
	if err != nil {
		return nil, fmt.Errorf("CA sealing key: %w", err)
	}
	return &CASealer{s: s}, nil
}

// OpenCASealer reads the sealing key at path (64 hex digits and a newline),
// creating it with mode 0600 on first use. The file must be a regular file,
// not a symbolic link, that only its owner can read.
func OpenCASealer(path string) (*CASealer, error) {
	key, err := seal.OpenKeyFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA sealing key: %w", err)
	}
	defer clear(key)
	return NewCASealer(key)
}

func caAAD(sandboxID string) []byte { return []byte("space sandbox CA key\x00" + sandboxID) }

// seal encrypts a sandbox's CA key: version, nonce, ciphertext and tag.
func (c *CASealer) seal(sandboxID string, keyPEM []byte) []byte {
	return c.s.Seal([]byte{caSealVersion}, keyPEM, caAAD(sandboxID))
}

// open decrypts what seal made for the same sandbox.
func (c *CASealer) open(sandboxID string, sealed []byte) ([]byte, error) {
	if len(sealed) < 1+c.s.Overhead() || sealed[0] != caSealVersion {
		return nil, fmt.Errorf("sandbox %s: sealed CA key: malformed: %w", sandboxID, errdefs.ErrFailedPrecondition)
	}
	key, err := c.s.Open(sealed[1:], caAAD(sandboxID))
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: sealed CA key does not open under this server's key (DATA/ca-seal.key replaced?): %w", sandboxID, errdefs.ErrFailedPrecondition)
	}
	return key, nil
}

// SealCAKey seals sandbox sandboxID's CA key (service.CAKeys).
func (c *CASealer) SealCAKey(sandboxID string, keyPEM []byte) []byte {
	return c.seal(sandboxID, keyPEM)
}

// OpenCAKey opens what SealCAKey sealed for the same sandbox.
func (c *CASealer) OpenCAKey(sandboxID string, sealed []byte) ([]byte, error) {
	return c.open(sandboxID, sealed)
}

// StartCA returns the interception CA to send with a start of sb's current
// execution (reconcile.CAFunc; service.Sandboxes.StartCA).
func (s *Server) StartCA(ctx context.Context, sb *sandbox.Sandbox) (*nodev1.SandboxCA, error) {
	return s.svc.StartCA(ctx, sb)
}

package service

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/sandboxca"
)

// Every sandbox has its own interception CA (ARCHITECTURE.md §7): the guest
// trusts its certificate, and the gateway of the node running the sandbox
// mints leaf certificates with it for the hosts that have a credential rule.
// The control plane makes it when the sandbox is created (a fork gets a new
// one; a sandbox recorded before CAs existed gets one at its next start) and
// keeps it with the sandbox record, its key sealed (CAKeys); every
// StartExecution carries it.

// caRenewBefore is how long before its expiry a sandbox's CA is replaced at
// a start: a CA that expires while the execution runs cannot mint leaves.
const caRenewBefore = 7 * 24 * time.Hour

// CAKeys seals sandboxes' CA keys at rest, each bound to its sandbox's id
// so that a sealed key copied to another sandbox's row does not open. The
// control plane's CASealer is one.
type CAKeys interface {
	SealCAKey(sandboxID string, keyPEM []byte) []byte
	OpenCAKey(sandboxID string, sealed []byte) ([]byte, error)
}

// newCA gives sb a fresh interception CA, its key sealed. Without CAKeys
// (a server configured without a sealing key) sandboxes get no CA and no
// credential injection.
func (s *Sandboxes) newCA(sb *sandbox.Sandbox) error {
	if s.cfg.CAKeys == nil {
		return nil
	}
	certPEM, keyPEM, err := sandboxca.Generate("SPACE sandbox " + sb.ID)
	if err != nil {
		return fmt.Errorf("sandbox %s: interception CA: %w", sb.ID, err)
	}
	defer clear(keyPEM)
	sb.CACert, sb.CAKey = string(certPEM), s.cfg.CAKeys.SealCAKey(sb.ID, keyPEM)
	return nil
}

// caUsable reports why sb's CA must be replaced ("" when it is fine).
func caUsable(sb *sandbox.Sandbox, now time.Time) string {
	if sb.CACert == "" || len(sb.CAKey) == 0 {
		return "the sandbox has no interception CA yet"
	}
	b, _ := pem.Decode([]byte(sb.CACert))
	if b == nil {
		return "the stored CA certificate is not PEM"
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "the stored CA certificate does not parse"
	}
	if now.Add(caRenewBefore).After(cert.NotAfter) {
		return "the CA certificate expires at " + cert.NotAfter.UTC().Format(time.RFC3339)
	}
	return ""
}

// StartCA returns the interception CA to send with a start of sb's current
// execution (reconcile.CAFunc). A sandbox without a usable CA (recorded
// before CAs existed, about to expire, or sealed under a key this server no
// longer has) gets a new one first, stored with the sandbox: sb is updated
// in place, Version included. nil without CAKeys.
func (s *Sandboxes) StartCA(ctx context.Context, sb *sandbox.Sandbox) (*nodev1.SandboxCA, error) {
	if s.cfg.CAKeys == nil {
		return nil, nil
	}
	why := caUsable(sb, time.Now())
	var keyPEM []byte
	if why == "" {
		var err error
		if keyPEM, err = s.cfg.CAKeys.OpenCAKey(sb.ID, sb.CAKey); err != nil {
			why = err.Error()
		}
	}
	if why != "" {
		if err := s.newCA(sb); err != nil {
			return nil, err
		}
		if err := s.store.UpdateSandbox(ctx, sb); err != nil {
			return nil, fmt.Errorf("sandbox %s: store new interception CA: %w", sb.ID, err)
		}
		s.Event(ctx, sb.ID, "ca", "new interception CA: "+why)
		var err error
		if keyPEM, err = s.cfg.CAKeys.OpenCAKey(sb.ID, sb.CAKey); err != nil {
			return nil, err
		}
	}
	defer clear(keyPEM)
	return &nodev1.SandboxCA{CertPEM: sb.CACert, KeyPEM: string(keyPEM)}, nil
}

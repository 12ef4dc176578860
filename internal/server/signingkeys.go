package server

import (
	"fmt"

	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
)

// signer is the key that signs capabilities now.
func (s *Server) signer() (*capability.Signer, error) {
	if s.cfg.Keyring != nil {
		return s.cfg.Keyring.Signer()
	}
	if s.cfg.Signer == nil {
		return nil, fmt.Errorf("%w: the control plane has no signing key", errdefs.ErrUnavailable)
	}
	return s.cfg.Signer, nil
}

// keySet is the verification bundle pushed to nodes.
func (s *Server) keySet() *capability.KeySet {
	if s.cfg.Keyring != nil {
		return s.cfg.Keyring.KeySet()
	}
	return s.cfg.Keys
}

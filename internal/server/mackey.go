package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"sync"
)

// e2bTokens holds the server's MAC key: the key of the E2B data plane's
// tokens (internal/e2bapi), of its page tokens, and of the nodes'
// credentials (nodecred.go).
type e2bTokens struct {
	once sync.Once
	key  []byte
}

// e2bKeyLabel is sealed once, deterministically, to derive the token key
// from the server's CA sealing key (see tokenKey).
const e2bKeyLabel = "space e2b token key derivation v1"

// e2bTokenKey returns the server's MAC key. It is derived from the
// server's persistent secret, the CA sealing key (DATA/ca-seal.key), so
// tokens survive restarts and agree across control planes sharing that
// file (seal.Sealer.Derive of a fixed label). A server without a sealer
// uses a random key: tokens then last until it restarts.
func (s *Server) e2bTokenKey() []byte {
	s.e2b.once.Do(func() {
		if c := s.cfg.CASealer; c != nil {
			sum := c.s.Derive(e2bKeyLabel)
			s.e2b.key = sum[:]
			return
		}
		s.e2b.key = make([]byte, 32)
		rand.Read(s.e2b.key)
		s.log.Warn("e2b: no CA sealing key configured; E2B access tokens are valid until the server restarts")
	})
	return s.e2b.key
}

// e2bMAC is the token of id for purpose label: hex HMAC-SHA256(key, label
// || id). The labels end with a NUL, which no sandbox or node id contains,
// so no label-and-id pair reads as another.
func (s *Server) e2bMAC(label, id string) string {
	m := hmac.New(sha256.New, s.e2bTokenKey())
	m.Write([]byte(label))
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// macEqual compares a token sent with the one derived, in constant time.
func macEqual(got, want string) bool {
	return len(got) == len(want) && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

package server

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
)

// GET /metrics counts every tenant's sandboxes and requests, so it is not
// public: it answers to an admin API key, or to the scrape token the
// operator configured (Config.MetricsToken, `space server
// --metrics-token-file`), compared in constant time. A tenant key is 403,
// no key or a wrong one 401.

// minMetricsToken is the shortest scrape token accepted: 128 bits in hex.
const minMetricsToken = 32

// metricsAuth admits the scrape token or an admin key to next.
func (s *Server) metricsAuth(next http.HandlerFunc) http.HandlerFunc {
	asAdmin := s.authenticate(s.requireAdmin(next))
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if ok && s.metricsTokenValid(strings.TrimSpace(tok)) {
			next(w, r)
			return
		}
		asAdmin(w, r)
	}
}

// metricsTokenValid reports whether tok is the configured scrape token.
func (s *Server) metricsTokenValid(tok string) bool {
	want := s.cfg.MetricsToken
	return want != "" && len(tok) == len(want) && subtle.ConstantTimeCompare([]byte(tok), []byte(want)) == 1
}

// ValidMetricsToken checks a scrape token read from the operator's file.
func ValidMetricsToken(tok string) error {
	if len(tok) < minMetricsToken {
		return fmt.Errorf("%w: metrics token is %d bytes: want at least %d (for example: openssl rand -hex 32)", errdefs.ErrInvalidArgument, len(tok), minMetricsToken)
	}
	for _, c := range tok {
		if c <= ' ' || c > '~' {
			return fmt.Errorf("%w: metrics token holds a space or a non-ASCII character: want printable ASCII", errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

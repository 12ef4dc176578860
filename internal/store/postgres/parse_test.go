package postgres

import (
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// FuzzParseConfig feeds parseConfig arbitrary database strings: it never
// panics, refuses with ErrInvalidArgument only, accepts only pool sizes in
// range, and never shows the password in an error.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		"db.internal:5432/space?sslmode=disable",
		"db/space?pool_max_conns=4",
		"db/space?pool_max_conns=0",
		"[::1]:5432/space?sslmode=verify-full&sslrootcert=/nonexistent",
		"db:port/space",
		"/space?host=/run/postgresql",
		"%zz",
		"db/space?sslmode=bogus",
	} {
		f.Add(seed, false)
	}
	f.Add("host=db password=S3cr3tPW sslmode=bogus", true)
	f.Add("host=db dbname='unterminated password=S3cr3tPW", true)
	f.Add("mysql://u:S3cr3tPW@db/space", true)
	f.Fuzz(func(t *testing.T, s string, raw bool) {
		if !raw {
			s = "postgres://u:S3cr3tPW@" + s
		}
		cfg, err := parseConfig(s)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("parseConfig(%q) = %v, want ErrInvalidArgument", s, err)
			}
			// In a URL built here the marker is the password (and only
			// that); a raw string may hold it anywhere.
			if !raw && strings.Count(s, "S3cr3tPW") == 1 && strings.Contains(err.Error(), "S3cr3tPW") {
				t.Fatalf("parseConfig(%q) error shows the password: %v", s, err)
			}
			return
		}
		if cfg == nil || cfg.MaxConns < 1 || cfg.MaxConns > maxMaxConns {
			t.Fatalf("parseConfig(%q) = %v", s, cfg)
		}
	})
}

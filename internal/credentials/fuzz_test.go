package credentials

import (
	"strings"
	"testing"
)

// FuzzHostMatch checks the host and pattern parsers on arbitrary input:
// no panics, normalization is idempotent and case-insensitive, and a match
// really is the pattern or a name below it.
func FuzzHostMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"*.example.com", "api.example.com"}, {"API.example.com.", "api.example.com"},
		{"10.0.0.1", "10.0.0.1"}, {"[::1]", "::1"}, {"*.com", "a.com"}, {"*", "x"},
		{"*.a.b", "a.b"}, {"a..b", "a..b"}, {"fe80::1%eth0", "fe80::1"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, host string) {
		norm, err := NormalizeHost(host)
		if err != nil {
			return
		}
		again, err := NormalizeHost(norm)
		if err != nil || again != norm {
			t.Fatalf("NormalizeHost not idempotent: %q -> %q -> %q, %v", host, norm, again, err)
		}
		if up, err := NormalizeHost(strings.ToUpper(host)); err == nil && up != norm && !strings.Contains(norm, ":") {
			t.Fatalf("case changes the host: %q vs %q", up, norm)
		}
		ok, rank := MatchHost(pattern, norm)
		if !ok {
			return
		}
		if ValidHostPattern(pattern) != nil {
			t.Fatalf("invalid pattern %q matched %q", pattern, norm)
		}
		p, wildcard, _ := parsePattern(pattern)
		switch {
		case !wildcard && p != norm:
			t.Fatalf("exact pattern %q matched %q", pattern, norm)
		case wildcard && (!strings.HasSuffix(norm, "."+p) || norm == p || rank <= 0):
			t.Fatalf("wildcard %q matched %q (rank %d)", pattern, norm, rank)
		}
	})
}

// FuzzHeadersValidate: a "headers" credential that validates splits into
// 2 to MaxInjectedHeaders distinct token names, each with a value of at
// least MinSecretLen bytes holding no CR, LF or NUL (none could split the
// request or hide another header).
func FuzzHeadersValidate(f *testing.F) {
	f.Add("X-Key,X-Org", "key-value-1\norg-value-2")
	f.Add("X-Key,x-key", "key-value-1\norg-value-2")
	f.Add("X-Key", "key-value-1")
	f.Add("X-Key,X-Org,", "key-value-1\norg-value-2\n")
	f.Fuzz(func(t *testing.T, names, secret string) {
		c := Credential{ID: "c1", Scope: Scope{Tenant: "t1"}, Name: "c1", Secret: []byte(secret),
			Injection: Injection{Method: MethodHeaders, Name: names}, AllowedHosts: []string{"a.example.com"}}
		if c.Validate() != nil {
			return
		}
		ns, vs, err := c.InjectedHeaders()
		if err != nil || len(ns) < 2 || len(ns) > MaxInjectedHeaders || len(ns) != len(vs) {
			t.Fatalf("valid %q/%q: %d names, %d values, %v", names, secret, len(ns), len(vs), err)
		}
		seen := map[string]bool{}
		for i, n := range ns {
			if n == "" || !isToken(n) || seen[strings.ToLower(n)] {
				t.Fatalf("valid %q: header name %q", names, n)
			}
			seen[strings.ToLower(n)] = true
			if len(vs[i]) < MinSecretLen || strings.ContainsAny(string(vs[i]), "\r\n\x00") {
				t.Fatalf("valid %q: value %q of %s", secret, vs[i], n)
			}
		}
	})
}

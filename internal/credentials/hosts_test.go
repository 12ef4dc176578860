package credentials

import (
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestNormalizeHost(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"API.Example.COM", "api.example.com", true},
		{"api.example.com.", "api.example.com", true},
		{"api.example.com..", "", false},
		{"10.0.0.1", "10.0.0.1", true},
		{"[2001:DB8::1]", "2001:db8::1", true},
		{"::ffff:10.0.0.1", "10.0.0.1", true},
		{"fe80::1%eth0", "", false},
		{"api.example.com:443", "", false},
		{"", "", false},
		{"a..b", "", false},
		{"-a.com", "", false},
		{"a b.com", "", false},
		{"*.example.com", "", false},
	}
	for _, tt := range tests {
		got, err := NormalizeHost(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("NormalizeHost(%q) = %q, %v; want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("NormalizeHost(%q) error %v is not ErrInvalidArgument", tt.in, err)
		}
	}
}

func TestMatchHost(t *testing.T) {
	tests := []struct {
		pattern, host string
		want          bool
	}{
		{"api.example.com", "api.example.com", true},
		{"API.example.com", "api.example.com", true},       // case in the pattern
		{"api.example.com.", "api.example.com", true},      // trailing dot in the pattern
		{"api.example.com", "api.example.org", false},      // no match
		{"api.example.com", "evil-api.example.com", false}, // exact is exact
		{"*.example.com", "api.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", false},      // the apex is not below itself
		{"*.example.com", "badexample.com", false},   // suffix on a label boundary
		{"*.example.com", "example.com.evil", false}, // not a prefix match
		{"*.Example.COM.", "x.example.com", true},
		{"10.0.0.1", "10.0.0.1", true},
		{"*", "example.com", false},         // invalid pattern matches nothing
		{"*.com", "example.com", false},     // too broad, invalid
		{"a.*.com", "a.b.com", false},       // inner wildcard invalid
		{"*.10.0.0.1", "x.10.0.0.1", false}, // a wildcard over an IP is refused
	}
	for _, tt := range tests {
		host, err := NormalizeHost(tt.host)
		if err != nil {
			t.Fatalf("NormalizeHost(%q): %v", tt.host, err)
		}
		if got, _ := MatchHost(tt.pattern, host); got != tt.want {
			t.Errorf("MatchHost(%q, %q) = %v, want %v", tt.pattern, tt.host, got, tt.want)
		}
	}
}

func TestMatchHostRank(t *testing.T) {
	_, exact := MatchHost("a.b.example.com", "a.b.example.com")
	_, long := MatchHost("*.b.example.com", "a.b.example.com")
	_, short := MatchHost("*.example.com", "a.b.example.com")
	if !(exact > long && long > short && short > 0) {
		t.Errorf("ranks exact=%d long=%d short=%d, want exact > long > short > 0", exact, long, short)
	}
}

func TestValidHostPattern(t *testing.T) {
	for _, p := range []string{"*", "*.com", "*.", "**.a.com", "a.*.com", "*.10.0.0.1x!", "", "a:80", "*.[::1]"} {
		if err := ValidHostPattern(p); !errdefs.IsInvalidArgument(err) {
			t.Errorf("ValidHostPattern(%q) = %v, want ErrInvalidArgument", p, err)
		}
	}
	for _, p := range []string{"a.com", "*.a.com", "::1", "[::1]", "1.2.3.4", "A.COM."} {
		if err := ValidHostPattern(p); err != nil {
			t.Errorf("ValidHostPattern(%q) = %v, want nil", p, err)
		}
	}
}

package egress

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestParsePolicyErrors(t *testing.T) {
	long := strings.Repeat("a", 64) + ".com"
	var many []string
	for i := 0; i <= MaxRules; i++ {
		many = append(many, fmt.Sprintf(`"h%d.example.com"`, i))
	}
	tests := []struct {
		name, json, want string
	}{
		{"not json", `{`, "decode JSON"},
		{"unknown field", `{"alow":{}}`, "unknown field"},
		{"trailing", `{} {}`, "trailing data"},
		{"bad cidr", `{"allow":{"cidrs":["10.0.0.0/33"]}}`, "allow.cidrs[0]"},
		{"cidr garbage", `{"deny":{"cidrs":["ten"]}}`, "deny.cidrs[0]"},
		{"host bits", `{"allow":{"cidrs":["10.0.0.1/8"]}}`, "did you mean 10.0.0.0/8"},
		{"mapped cidr", `{"allow":{"cidrs":["::ffff:10.0.0.0/104"]}}`, "IPv4-mapped"},
		{"zone", `{"allow":{"cidrs":["fe80::1%eth0"]}}`, "allow.cidrs[0]"},
		{"port 0", `{"allow":{"ports":["0"]}}`, "out of range"},
		{"port big", `{"allow":{"ports":["65536"]}}`, "out of range"},
		{"port text", `{"allow":{"ports":["https"]}}`, "not a port number"},
		{"port negative", `{"allow":{"ports":["-1"]}}`, "not a port number"},
		{"range backwards", `{"allow":{"ports":["9000-8000"]}}`, "backwards"},
		{"range open", `{"allow":{"ports":["8000-"]}}`, "not a port number"},
		{"too many", `{"allow":{"domains":[` + strings.Join(many, ",") + `]}}`, "more than 1000"},
		{"label too long", `{"allow":{"domains":["` + long + `"]}}`, "longer than 63"},
		{"name too long", `{"allow":{"domains":["` + strings.Repeat("a.", 127) + `com"]}}`, "longer than 253"},
		{"uppercase", `{"allow":{"domains":["Example.com"]}}`, "lowercase"},
		{"unicode", `{"allow":{"domains":["bücher.de"]}}`, "punycode"},
		{"underscore", `{"allow":{"domains":["a_b.example.com"]}}`, "only letters, digits and hyphens"},
		{"space", `{"allow":{"domains":["a b.com"]}}`, "only letters"},
		{"leading hyphen", `{"allow":{"domains":["-a.com"]}}`, "hyphen"},
		{"r-ldh", `{"allow":{"domains":["ab--cd.com"]}}`, "positions 3 and 4"},
		{"empty label", `{"allow":{"domains":["a..com"]}}`, "empty label"},
		{"empty", `{"allow":{"domains":[""]}}`, "empty name"},
		{"ip as domain", `{"allow":{"domains":["10.0.0.1"]}}`, "use cidrs"},
		{"single label", `{"allow":{"domains":["intranet"]}}`, "single label"},
		{"tld wildcard", `{"allow":{"domains":["*.com"]}}`, "whole top-level domain"},
		{"star alone", `{"allow":{"domains":["*"]}}`, "wildcard must be the whole first label"},
		{"inner star", `{"allow":{"domains":["a.*.com"]}}`, "wildcard must be"},
		{"partial star", `{"allow":{"domains":["a*.example.com"]}}`, "wildcard must be"},
		{"double star", `{"allow":{"domains":["*.*.example.com"]}}`, "wildcard must be"},
		{"too big", `{"allow":{"domains":["` + strings.Repeat("x", MaxPolicyBytes) + `"]}}`, "bytes, more than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePolicy([]byte(tc.json))
			if err == nil {
				t.Fatalf("ParsePolicy = %+v, want error containing %q", p.Spec(), tc.want)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error %v is not ErrInvalidArgument", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParsePolicyValid(t *testing.T) {
	in := `{"allow_internet":false,
		"allow":{"domains":["api.example.com","*.pypi.org","xn--bcher-kva.de","*.co.uk","example.com."],
		         "cidrs":["203.0.113.0/24","2606:4700::/32","8.8.8.8"],"ports":["443","8000-8100","1-65535"]},
		"deny":{"domains":["*.zip"],"cidrs":["1.2.3.0/24"],"ports":["25"]}}`
	p, err := ParsePolicy([]byte(in))
	if err != nil {
		t.Fatalf("ParsePolicy: %v", err)
	}
	s := p.Spec()
	if s.AllowInternet || len(s.Allow.Domains) != 5 || len(s.Allow.CIDRs) != 3 || len(s.Deny.Ports) != 1 {
		t.Fatalf("Spec() = %+v, does not round-trip the input", s)
	}
	// Spec returns a copy: changing it does not change the policy.
	s.Allow.Domains[0] = "evil.example.net"
	if got := p.Spec().Allow.Domains[0]; got != "api.example.com" {
		t.Fatalf("Spec() aliasing: policy domain changed to %q", got)
	}
	if _, err := ParsePolicy([]byte(`{}`)); err != nil {
		t.Fatalf("ParsePolicy({}): %v", err)
	}
}

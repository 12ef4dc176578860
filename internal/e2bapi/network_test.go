package e2bapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
)

// TestE2BEgressPolicy: E2B network configs and the SPACE policy each one
// becomes, and the ones refused with the field they name.
func TestE2BEgressPolicy(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name              string
		allowOut, denyOut []string
		internet          *bool
		want              egress.Spec
		wantDeny          int    // when set, only the count of deny CIDRs is checked
		err               string // a part of the error, "" for none
	}{
		{name: "nothing: allow everything", want: egress.Spec{AllowInternet: true}},
		{name: "internet true", internet: &yes, want: egress.Spec{AllowInternet: true}},
		{name: "internet false is denyOut ALL_TRAFFIC", internet: &no, want: egress.Spec{}},
		{name: "deny all", denyOut: []string{"0.0.0.0/0"}, want: egress.Spec{}},
		{
			name: "allowlist: addresses, CIDRs, domains", denyOut: []string{"0.0.0.0/0", "1.2.3.4"},
			allowOut: []string{"1.1.1.1", "8.8.8.0/24", "Example.COM", "*.pypi.org"},
			want:     egress.Spec{Allow: egress.RuleSet{Domains: []string{"example.com", "*.pypi.org"}, CIDRs: []string{"1.1.1.1/32", "8.8.8.0/24"}}},
		},
		{
			name: "allowlist by allow_internet_access false", internet: &no, allowOut: []string{"api.example.com"},
			want: egress.Spec{Allow: egress.RuleSet{Domains: []string{"api.example.com"}}},
		},
		{
			name: "blocklist", denyOut: []string{"1.2.3.4", "8.8.0.0/16", "2001:db8::/32"},
			want: egress.Spec{AllowInternet: true, Deny: egress.RuleSet{CIDRs: []string{"1.2.3.4/32", "8.8.0.0/16", "2001:db8::/32"}}},
		},
		{
			name: "allow beats deny: the allowed part is cut out of the deny CIDR", denyOut: []string{"8.8.0.0/16"}, allowOut: []string{"8.8.8.8"},
			want: egress.Spec{AllowInternet: true, Allow: egress.RuleSet{CIDRs: []string{"8.8.8.8/32"}}, Deny: egress.RuleSet{CIDRs: []string{
				"8.8.128.0/17", "8.8.64.0/18", "8.8.32.0/19", "8.8.16.0/20", "8.8.0.0/21", "8.8.12.0/22", "8.8.10.0/23",
				"8.8.9.0/24", "8.8.8.128/25", "8.8.8.64/26", "8.8.8.32/27", "8.8.8.16/28", "8.8.8.0/29", "8.8.8.12/30", "8.8.8.10/31", "8.8.8.9/32",
			}}},
		},
		{
			name: "an allowed CIDR covering a denied one removes it", denyOut: []string{"8.8.8.0/24", "9.9.9.9"}, allowOut: []string{"8.8.0.0/16"},
			want: egress.Spec{AllowInternet: true, Allow: egress.RuleSet{CIDRs: []string{"8.8.0.0/16"}}, Deny: egress.RuleSet{CIDRs: []string{"9.9.9.9/32"}}},
		},
		{name: "allowOut ALL_TRAFFIC beats every deny", allowOut: []string{"0.0.0.0/0"}, denyOut: []string{"0.0.0.0/0"}, want: egress.Spec{AllowInternet: true}},
		{
			name: "a private range allowed on purpose", denyOut: []string{"0.0.0.0/0"}, allowOut: []string{"10.20.0.0/16"},
			want: egress.Spec{Allow: egress.RuleSet{CIDRs: []string{"10.20.0.0/16"}}},
		},
		{name: "domain without deny all", allowOut: []string{"example.com"}, err: `network.allowOut lists domain "example.com", which needs all other traffic denied`},
		{name: "domain with a partial deny", allowOut: []string{"example.com"}, denyOut: []string{"1.2.3.4"}, err: `add "0.0.0.0/0" (ALL_TRAFFIC) to denyOut`},
		{name: "domain in denyOut", denyOut: []string{"evil.com"}, err: `network.denyOut[0] "evil.com": domain names are not supported in denyOut`},
		{name: "host bits", denyOut: []string{"10.0.0.1/8"}, err: `network.denyOut[0] "10.0.0.1/8": has host bits set; did you mean 10.0.0.0/8`},
		{name: "bad CIDR", allowOut: []string{"1.2.3.4/40"}, err: `network.allowOut[0] "1.2.3.4/40": not a CIDR`},
		{name: "bad domain", denyOut: []string{"0.0.0.0/0"}, allowOut: []string{"ok.com", "not a name"}, err: `network.allowOut[1] "not a name": not a CIDR, an address or a domain name`},
		{name: "bare wildcard", denyOut: []string{"0.0.0.0/0"}, allowOut: []string{"*"}, err: `network.allowOut[0] "*"`},
		{name: "mapped address", allowOut: []string{"::ffff:1.2.3.4"}, err: `network.allowOut[0] "::ffff:1.2.3.4": write an IPv4 address in its IPv4 form`},
		{name: "too many", denyOut: make([]string, egress.MaxRules+1), err: "more than 1000"},
		{name: "cut into too many pieces", denyOut: []string{"::/0", "8000::/1"}, allowOut: v6Addrs(500, 1<<20), err: "makes more than 1000 denied CIDRs"},
		{name: "a repeated deny entry is cut once", denyOut: repeat("::/0", 500), allowOut: v6Addrs(5, 1), wantDeny: 127}, // as one ::/0 less ::1-::5
		{name: "one cut of a /0 in IPv6", denyOut: []string{"::/0"}, allowOut: []string{"2001:db8::1"}, wantDeny: 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := e2bEgressPolicy(tc.allowOut, tc.denyOut, tc.internet)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("error %v; want InvalidArgument containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantDeny != 0 {
				if n := len(p.Spec().Deny.CIDRs); n != tc.wantDeny {
					t.Errorf("%d deny CIDRs, want %d", n, tc.wantDeny)
				}
				return
			}
			if got := p.Spec(); !reflect.DeepEqual(normSpec(got), normSpec(tc.want)) {
				t.Errorf("policy %+v\nwant   %+v", got, tc.want)
			}
		})
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// v6Addrs is n IPv6 addresses, step apart in their low 32 bits.
func v6Addrs(n, step int) []string {
	out := make([]string, n)
	for i := range out {
		v := (i + 1) * step
		out[i] = fmt.Sprintf("2001:db8::%x:%x", v>>16, v&0xffff)
	}
	return out
}

func normSpec(s egress.Spec) egress.Spec {
	for _, l := range []*[]string{&s.Allow.Domains, &s.Allow.CIDRs, &s.Allow.Ports, &s.Deny.Domains, &s.Deny.CIDRs, &s.Deny.Ports} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	return s
}

// TestE2BCreateEgress: a create without allowOut or denyOut keeps the
// template's policy (nil); one with them gets its own; the list of strings
// is checked.
func TestE2BCreateEgress(t *testing.T) {
	no := false
	for _, tc := range []struct {
		network string
		nilPol  bool
		err     bool
	}{
		{``, true, false},
		{`null`, true, false},
		{`{"allowPublicTraffic":false}`, true, false},
		{`{"allowOut":[],"denyOut":null}`, true, false},
		{`{"denyOut":["0.0.0.0/0"]}`, false, false},
		{`{"DENYOUT":["0.0.0.0/0"]}`, false, false},
		{`{"allowOut":"1.1.1.1"}`, false, true},
		{`{"denyOut":[1]}`, false, true},
	} {
		p, err := e2bCreateEgress(json.RawMessage(tc.network), nil)
		if (err != nil) != tc.err || !tc.err && (p == nil) != tc.nilPol {
			t.Errorf("e2bCreateEgress(%s) = %v, %v; want nil %v, error %v", tc.network, p, err, tc.nilPol, tc.err)
		}
	}
	// allow_internet_access false with an allowlist: the one policy says both.
	p, err := e2bCreateEgress(json.RawMessage(`{"allowOut":["1.1.1.1"]}`), &no)
	if err != nil || p.Spec().AllowInternet {
		t.Fatalf("allowOut with allow_internet_access false: %+v, %v", p.Spec(), err)
	}
}

// TestE2BNetworkOf: getInfo's allowOut and denyOut say back what the
// create asked.
func TestE2BNetworkOf(t *testing.T) {
	for _, tc := range []struct{ allowOut, denyOut, wantAllow, wantDeny []string }{
		{nil, nil, nil, nil},
		{[]string{"1.1.1.1/32", "example.com"}, []string{"0.0.0.0/0"}, []string{"1.1.1.1/32", "example.com"}, []string{"0.0.0.0/0"}},
		{nil, []string{"8.8.8.0/24"}, nil, []string{"8.8.8.0/24"}},
	} {
		p, err := e2bEgressPolicy(tc.allowOut, tc.denyOut, nil)
		if err != nil {
			t.Fatal(err)
		}
		allow, deny := e2bNetworkOf(p)
		if !reflect.DeepEqual(allow, tc.wantAllow) || !reflect.DeepEqual(deny, tc.wantDeny) {
			t.Errorf("%v/%v: getInfo says %v/%v", tc.allowOut, tc.denyOut, allow, deny)
		}
	}
}

// e2bReference decides a connection as E2B's documentation says: an
// allowOut entry that matches allows it, else a denyOut entry that matches
// denies it, else it is allowed. ALL_TRAFFIC ("0.0.0.0/0") is every
// destination, as the SDK calls it: E2B sandboxes have no IPv6, and SPACE's
// mapping denies IPv6 under it too (the fuzzer's first find).
func e2bReference(allowOut, denyOut []string, internet *bool, dst netip.Addr, domain string) bool {
	match := func(e string) bool {
		if e == e2bAllTraffic {
			return true // ALL_TRAFFIC is every destination, IPv6 too
		}
		if pfx, err := netip.ParsePrefix(e); err == nil {
			return pfx.Contains(dst)
		}
		if a, err := netip.ParseAddr(e); err == nil {
			return a == dst
		}
		e = strings.ToLower(e)
		if rest, ok := strings.CutPrefix(e, "*."); ok {
			return strings.HasSuffix(domain, "."+rest)
		}
		return domain != "" && domain == e
	}
	for _, e := range allowOut {
		if match(e) {
			return true
		}
	}
	if internet != nil && !*internet {
		return false
	}
	for _, e := range denyOut {
		if match(e) {
			return false
		}
	}
	return true
}

var openPolicy, _ = egress.NewPolicy(egress.Spec{AllowInternet: true})

// FuzzE2BEgressPolicy: whatever E2B config is accepted decides every
// public destination as E2B's own rules do (e2bReference); a refusal is
// InvalidArgument. SPACE's always-denied addresses (private, reserved)
// are denied whatever E2B would do, so only public ones are compared.
func FuzzE2BEgressPolicy(f *testing.F) {
	f.Add("8.8.8.8", "8.8.0.0/16", byte(0), []byte{8, 8, 8, 8}, "")
	f.Add("1.1.1.0/24,example.com", "0.0.0.0/0", byte(1), []byte{1, 1, 1, 9}, "example.com")
	f.Add("*.pypi.org", "", byte(2), []byte{151, 101, 0, 1}, "files.pypi.org")
	f.Add("", "9.0.0.0/8,9.9.9.9", byte(0), []byte{9, 9, 9, 9}, "")
	f.Add("0.0.0.0/0", "1.0.0.0/8", byte(0), []byte{1, 2, 3, 4}, "")
	f.Add("", "0.0.0.0/0", byte(0), []byte("0000000000000000"), "")
	f.Fuzz(func(t *testing.T, allowS, denyS string, internetB byte, dstB []byte, domain string) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		allowOut, denyOut := split(allowS), split(denyS)
		var internet *bool
		if internetB%3 != 0 {
			v := internetB%3 == 1
			internet = &v
		}
		p, err := e2bEgressPolicy(allowOut, denyOut, internet)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error not InvalidArgument: %v", err)
			}
			return
		}
		dst, ok := netip.AddrFromSlice(dstB)
		if !ok {
			return
		}
		if domain != "" {
			if _, err := egress.NewPolicy(egress.Spec{Allow: egress.RuleSet{Domains: []string{domain}}}); err != nil || strings.HasPrefix(domain, "*") {
				domain = ""
			}
		}
		if !openPolicy.AllowConnection(dst, 443, "").Allow {
			return // always denied by SPACE (or opened only by an explicit private CIDR)
		}
		want := e2bReference(allowOut, denyOut, internet, dst, domain)
		if got := p.AllowConnection(dst, 443, domain); got.Allow != want {
			t.Fatalf("allowOut %q denyOut %q internet %v: %s (domain %q): SPACE %v (%s), E2B %v; policy %+v",
				allowOut, denyOut, internet, dst, domain, got.Allow, got.Reason, want, p.Spec())
		}
	})
}

package e2bapi

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/service"
)

// checkMaskedHosts fails t unless mask gives a valid Host header, with no
// placeholder left, for every port.
func checkMaskedHosts(t *testing.T, mask string) {
	t.Helper()
	for _, port := range []int{1, 80, 3000, 49983, 65535} {
		h := service.MaskedHost(mask, port)
		if h == "" || !httpguts.ValidHostHeader(h) || strings.ContainsAny(h, "${} \r\n") {
			t.Fatalf("mask %q accepted, but for port %d gives Host %q", mask, port, h)
		}
	}
}

// TestParseHostMask: maskRequestHost as E2B documents it (${PORT} for the
// port) is taken; what would not make a Host header for every port, or
// names a placeholder SPACE does not replace, is refused naming the field.
func TestParseHostMask(t *testing.T) {
	for _, ok := range []string{
		"${PORT}-myapp.example.com", "myapp.local:${PORT}", "localhost", "example.com:8080",
		"127.0.0.1", "[::1]:${PORT}", "app-${PORT}.internal", "a_b.example",
	} {
		got, err := parseHostMask(ok)
		if err != nil || got != ok {
			t.Errorf("parseHostMask(%q) = %q, %v; want it as given", ok, got, err)
			continue
		}
		checkMaskedHosts(t, got)
	}
	for _, bad := range []string{
		"", "a b.com", "x.com/path", "x.com\r\nX-Evil: 1", "${HOST}.example.com", "$PORT.example.com",
		"x.com:0", "x.com:65536", "x.com:${PORT}0", "x.com:port", "a..b", ".a", "x.com:", "a:b:c",
		strings.Repeat("a", 64) + ".com", strings.Repeat("a.", 130) + "com", "héllo.com", "user@x.com",
	} {
		if got, err := parseHostMask(bad); err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "maskRequestHost") {
			t.Errorf("parseHostMask(%q) = %q, %v; want an InvalidArgument naming maskRequestHost", bad, got, err)
		}
	}
}

// TestE2BRefusedNetworkSaysWhy: each network field SPACE cannot do is
// refused naming it and why.
func TestE2BRefusedNetworkSaysWhy(t *testing.T) {
	for field, why := range map[string]string{
		"egressProxy": "SOCKS5", "httpsPorts": "plain HTTP", "dnsServers": "own resolver", "bogus": "does not know",
	} {
		_, err := parseE2BNetwork([]byte(`{"`+field+`":[1]}`), nil)
		if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "network."+field) || !strings.Contains(err.Error(), why) {
			t.Errorf("network.%s: %v; want a 400 naming it and saying %q", field, err, why)
		}
	}
}

func FuzzParseHostMask(f *testing.F) {
	for _, s := range []string{"${PORT}-a.example.com", "a:${PORT}", "[::1]:80", "x${PORT}${PORT}", "a:${PORT}0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, mask string) {
		got, err := parseHostMask(mask)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("parseHostMask(%q): %v, not InvalidArgument", mask, err)
			}
			return
		}
		if got != mask {
			t.Fatalf("parseHostMask(%q) = %q, changed", mask, got)
		}
		checkMaskedHosts(t, got)
	})
}

// TestE2BIAMRefused: a create asking for E2B workload tokens (iam) is
// refused naming it; an empty iam asks for nothing.
func TestE2BIAMRefused(t *testing.T) {
	for raw, refuse := range map[string]bool{
		``: false, `null`: false, `{}`: false, `{"tokens":{}}`: false, `{"tokens":null}`: false,
		`{"tokens":{"aws":{"audience":"sts.amazonaws.com","tokenType":"JWT-SVID"}}}`: true, `{"other":1}`: true, `"x"`: true,
	} {
		err := e2bUnsupported(&e2bNewSandbox{IAM: json.RawMessage(raw)})
		if refuse != (err != nil) || err != nil && (!errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "iam")) {
			t.Errorf("iam %s: %v; want refused %v, naming iam", raw, err, refuse)
		}
	}
}

package ingress

import (
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/sandbox"
)

func TestParseIngressHost(t *testing.T) {
	id := strings.Repeat("a", 20)
	for _, tc := range []struct {
		host   string
		id     string
		port   int
		ingres bool
	}{
		{"8080-" + id + ".localhost:7070", id, 8080, true},
		{"8080-" + id + ".LocalHost.", id, 8080, true},
		{"1-" + id + ".localhost", id, 1, true},
		{"65535-" + id + ".localhost", id, 65535, true},
		{"65536-" + id + ".localhost", "", 0, true},
		{"0-" + id + ".localhost", "", 0, true},
		{"80-short.localhost", "", 0, true},
		{"localhost:7070", "", 0, false},
		{"127.0.0.1:7070", "", 0, false},
		{"[::1]:7070", "", 0, false},
		{"x.8080-" + id + ".localhost", "", 0, false},
		{"api.localhost", "", 0, false},
		{"-" + id + ".localhost", "", 0, false},
		{"+80-" + id + ".localhost", "", 0, false},
		{"8080-" + id + ".example.com", "", 0, false},
		{"", "", 0, false},
	} {
		gotID, gotPort, ok := parseIngressHost(tc.host, "localhost")
		if gotID != tc.id || gotPort != tc.port || ok != tc.ingres {
			t.Errorf("parseIngressHost(%q) = %q, %d, %v; want %q, %d, %v", tc.host, gotID, gotPort, ok, tc.id, tc.port, tc.ingres)
		}
	}
	if id2, port, ok := parseIngressHost("443-"+id+".sb.example.com", "sb.example.com"); !ok || id2 != id || port != 443 {
		t.Errorf("custom domain: %q %d %v", id2, port, ok)
	}
}

func FuzzParseIngressHost(f *testing.F) {
	f.Add("8080-abcdefghijklmnopqrst.localhost:7070")
	f.Add("localhost")
	f.Add("1-.localhost.")
	f.Fuzz(func(t *testing.T, host string) {
		id, port, ok := parseIngressHost(host, "localhost")
		if id != "" && (!ok || !sandbox.ValidID(id) || port < 1 || port > 65535) {
			t.Fatalf("parseIngressHost(%q) = %q, %d, %v", host, id, port, ok)
		}
		if ok && !strings.Contains(strings.ToLower(host), "localhost") {
			t.Fatalf("parseIngressHost(%q) took a host outside the domain", host)
		}
	})
}

func TestWithoutPortToken(t *testing.T) {
	for in, want := range map[string]string{
		"":                                    "",
		"a=1":                                 "a=1",
		"space_port_token=x":                  "",
		"a=1&space_port_token=x&b=%20":        "a=1&b=%20",
		"space%5Fport%5Ftoken=x&c":            "c",
		"space_port_token_other=1":            "space_port_token_other=1",
		"space_port_token=1&space_port_token": "",
	} {
		if got := withoutPortToken(in); got != want {
			t.Errorf("withoutPortToken(%q) = %q, want %q", in, got, want)
		}
	}
}

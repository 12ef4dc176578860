package e2b_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/gateway/dnsgw/dnstest"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/testenv/devserver"
)

// The hosts of rules.mjs: RULES_HOST has a rule, RULES_OTHER none. Both
// serve HTTPS in the test's upstream namespace with certificates of the
// test's own CA, which the gateway trusts (--gateway-upstream-ca) and the
// sandbox does not.
const (
	rulesHost  = "api.rules.test"
	rulesOther = "other.rules.test"
	rulesV1    = "Bearer e2b-rules-first-0123456789abcdef"
	rulesV2    = "Bearer e2b-rules-second-0123456789abcdef"
)

// TestE2BSDKNetworkRules runs rules.mjs with the published SDK: network.rules
// on create inject the header into the sandbox's HTTPS requests to the
// named host, and only there; the sandbox cannot read the value (its
// environment, its files, an upstream echoing the request back);
// updateNetwork replaces the rule, sets two headers for the host (both
// reach the upstream, neither the sandbox) and, left out, clears them. The upstream
// records what each request path carried and the test checks it after.
func TestE2BSDKNetworkRules(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the all-in-one server starts the root node-manager and the test makes a network namespace; run as root (CI does)")
	}
	for _, tool := range []string{"node", "npm", "ip", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: scripts/deps.sh test installs it (make test runs it)", tool)
		}
	}
	modules := installSDK(t)
	work := t.TempDir()
	for _, name := range []string{"lib.mjs", "package.json", "rules.mjs"} {
		copyFile(t, name, filepath.Join(work, name))
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-tags", "netgo,osusergo", "-o", filepath.Join(work, "httpsget"), "../../e2e/testdata/httpsget")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build httpsget: %v\n%s", err, out)
	}

	ns := newUpstreamNetns(t)
	ca := testenv.NewUpstreamCA(t, "compat upstream CA")
	seen := &ruleSeen{got: map[string][]string{}}
	ns.serveRuleHTTPS(t, ca, netAllowed, rulesHost, seen)
	ns.serveRuleHTTPS(t, ca, netOther, rulesOther, seen)
	pc := ns.listen(t, func() (any, error) { return net.ListenPacket("udp", netDNS+":53") }).(net.PacketConn)
	dns := dnstest.Start(pc, map[string][]netip.Addr{
		rulesHost: {netip.MustParseAddr(netAllowed)}, rulesOther: {netip.MustParseAddr(netOther)},
	})
	t.Cleanup(dns.Close)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.PEM")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}

	bin := devserver.Build(t)
	srv := startServer(t, bin, "ns", "--egress-netns", ns.path, "--dns-upstream", netDNS+":53", "--gateway-upstream-ca", caFile)
	t.Setenv("RULES_HOST", rulesHost)
	t.Setenv("RULES_OTHER", rulesOther)
	t.Setenv("RULES_V1", rulesV1)
	t.Setenv("RULES_V2", rulesV2)
	srv.runScript(t, work, "rules.mjs")

	for path, want := range map[string]string{
		rulesHost + "/one":                 rulesV1,       // the rule's value, over the sandbox's placeholder
		rulesHost + "/echo":                rulesV1,       // echoed back, and removed before the sandbox read it
		rulesOther + "/one":                "placeholder", // no rule: what the sandbox sent
		rulesHost + "/two":                 rulesV2,       // replaced by updateNetwork
		rulesHost + "/multi":               rulesV1,       // two headers of one host: both set
		rulesHost + "/multi X-Second":      rulesV2,
		rulesHost + "/echo-multi X-Second": rulesV2,
		rulesHost + "/three":               "", // cleared by updateNetwork
	} {
		if got := seen.of(path); len(got) != 1 || got[0] != want {
			t.Errorf("upstream %s received X-Rule %q, want [%q]", path, got, want)
		}
	}
	for _, v := range []string{rulesV1, rulesV2} {
		if strings.Contains(srv.Logs(), v) {
			t.Errorf("a rule's value is in the server log")
		}
	}
}

// ruleSeen records the X-Rule header of each request, by host and path,
// and its X-Second header under "host/path X-Second".
type ruleSeen struct {
	mu  sync.Mutex // guards got
	got map[string][]string
}

func (s *ruleSeen) add(key, v string) { s.mu.Lock(); s.got[key] = append(s.got[key], v); s.mu.Unlock() }

func (s *ruleSeen) of(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got[key]...)
}

// serveRuleHTTPS serves TLS for host on addr:443 in the namespace; /echo
// answers the X-Rule header it received in its body.
func (n *upstreamNetns) serveRuleHTTPS(t *testing.T, ca *testenv.UpstreamCA, addr, host string, seen *ruleSeen) {
	ln := n.listen(t, func() (any, error) { return net.Listen("tcp", addr+":443") }).(net.Listener)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			v := r.Header.Get("X-Rule")
			seen.add(host+r.URL.Path, v)
			if second := r.Header.Get("X-Second"); second != "" {
				seen.add(host+r.URL.Path+" X-Second", second)
			}
			switch r.URL.Path {
			case "/echo":
				fmt.Fprintf(w, "echo %s\n", v)
				return
			case "/echo-multi":
				fmt.Fprintf(w, "echo %s %s\n", v, r.Header.Get("X-Second"))
				return
			}
			fmt.Fprintf(w, "hello from %s", host)
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, host)}},
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
}

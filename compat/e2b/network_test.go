package e2b_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/gateway/dnsgw/dnstest"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/testenv/devserver"
)

// The "public" addresses network.mjs reaches, served in a network
// namespace of the test's own, which the server's gateways dial from
// (--egress-netns), as e2e's egress tests do.
const (
	netAllowed    = "20.0.0.10"
	netOther      = "20.0.0.11"
	netDomainAddr = "20.0.0.12"
	netDNS        = "20.0.0.53"
	netDomain     = "allowed.test"
)

// TestE2BSDKNetwork runs network.mjs (network.allowOut/denyOut,
// updateNetwork, getInfo's network, refusals) with the published SDK (the
// newest pinned and 2.45) on ns sandboxes and, where QEMU is installed, on microVMs (their traffic
// reaches the gateway through QEMU's network device).
func TestE2BSDKNetwork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the all-in-one server starts the root node-manager and the test makes a network namespace; run as root (CI does)")
	}
	for _, tool := range []string{"node", "npm", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: scripts/deps.sh test installs it (make test runs it)", tool)
		}
	}
	modules := installSDK(t)
	work := t.TempDir()
	for _, name := range []string{"lib.mjs", "package.json", "network.mjs"} {
		copyFile(t, name, filepath.Join(work, name))
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ns := newUpstreamNetns(t)
	for _, a := range []string{netAllowed, netOther, netDomainAddr} {
		ns.serveHTTP(t, a)
	}
	pc := ns.listen(t, func() (any, error) { return net.ListenPacket("udp", netDNS+":53") }).(net.PacketConn)
	dns := dnstest.Start(pc, map[string][]netip.Addr{netDomain: {netip.MustParseAddr(netDomainAddr)}})
	t.Cleanup(dns.Close)

	bin := devserver.Build(t)
	t.Setenv("NET_ALLOWED", netAllowed)
	t.Setenv("NET_OTHER", netOther)
	t.Setenv("NET_DOMAIN", netDomain)
	t.Setenv("NET_DOMAIN_ADDR", netDomainAddr)
	for _, rt := range []string{"ns", "vm"} {
		t.Run(rt, func(t *testing.T) {
			if _, err := exec.LookPath("qemu-system-x86_64"); rt == "vm" && err != nil {
				t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
			}
			srv := startServer(t, bin, rt, "--egress-netns", ns.path, "--dns-upstream", netDNS+":53")
			pkgs := []string{"e2b"}
			if rt == "ns" { // the SDK's side is the same on both runtimes
				pkgs = append(pkgs, "e2b-2.45")
			}
			for _, pkg := range pkgs {
				t.Run(pkg, func(t *testing.T) {
					t.Setenv("E2B_PACKAGE", pkg)
					srv.runScript(t, work, "network.mjs")
				})
			}
		})
	}
}

// upstreamNetns is a network namespace standing for the internet: its
// addresses live on its loopback, local there and nowhere else.
type upstreamNetns struct{ name, path string }

func newUpstreamNetns(t *testing.T) *upstreamNetns {
	t.Helper()
	var b [4]byte
	rand.Read(b[:])
	n := &upstreamNetns{name: "spc-e2bnet-" + hex.EncodeToString(b[:])}
	n.path = "/run/netns/" + n.name
	ipCmd(t, "netns", "add", n.name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.name).Run() })
	ipCmd(t, "-n", n.name, "link", "set", "lo", "up")
	for _, a := range []string{netAllowed, netOther, netDomainAddr, netDNS} {
		ipCmd(t, "-n", n.name, "addr", "add", a+"/32", "dev", "lo")
	}
	return n
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
}

// listen runs open on a thread inside the namespace: the socket it
// creates belongs there for its life.
func (n *upstreamNetns) listen(t *testing.T, open func() (any, error)) any {
	t.Helper()
	v, err := testenv.InNetns(n.path, open)
	if err != nil {
		t.Fatalf("listen in %s: %v", n.name, err)
	}
	return v
}

// serveHTTP answers "upstream ADDR host HOST" on addr:80.
func (n *upstreamNetns) serveHTTP(t *testing.T, addr string) {
	ln := n.listen(t, func() (any, error) { return net.Listen("tcp", net.JoinHostPort(addr, "80")) }).(net.Listener)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream %s host %s", addr, r.Host)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

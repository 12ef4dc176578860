package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/gateway/dnsgw/dnstest"
	"github.com/spacesandbox/space/internal/testenv"
)

// egressNet is a network namespace standing in for the internet: the
// gateway's upstream connections and DNS queries leave only through it
// (--egress-netns), it has no default route, and its "public" addresses
// exist on its loopback interface. No packet of these tests can leave
// the machine.
type egressNet struct {
	t    *testing.T
	name string
	path string
	dns  *dnstest.Server
	hits map[string]*atomic.Int64 // requests per upstream address
	// canaries counts connections accepted per HOST:PORT by listeners that
	// must never see one (serveCanary).
	canaries map[string]*atomic.Int64

	mu    sync.Mutex
	hosts map[string][]string // the Host of every request per upstream address, in order
}

// hostsAt returns the Host headers of the requests that reached addr.
func (e *egressNet) hostsAt(addr string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.hosts[addr]...)
}

// Addresses inside the egress namespace.
const (
	upAllowed  = "20.0.0.10" // allowed.test
	upDenied   = "20.0.0.11" // denied.test
	upRaw      = "20.0.0.12" // reached by address only
	upDNS      = "20.0.0.53"
	upInternal = "10.99.0.1" // internal.test: private, always denied
	upMetadata = "169.254.169.254"
	// upV6 is a public IPv6 address with a server behind it: the gateway
	// has no IPv6, so nothing may reach it, under any policy.
	upV6 = "2001:4860:4860::8888"
)

// canaryPorts are the ports tried on each of the host's addresses, besides
// the ports the server itself listens on (the control plane and the
// node-api).
var canaryPorts = []string{"22", "80", "443", "2375", "5432", "6443", "8080", "9000", "10250"}

func newEgressNet(t *testing.T) *egressNet {
	t.Helper()
	var b [4]byte
	rand.Read(b[:])
	os.MkdirAll("/run/netns", 0o755)
	e := &egressNet{t: t, name: "spc-egress-" + hex.EncodeToString(b[:]), hits: map[string]*atomic.Int64{}, canaries: map[string]*atomic.Int64{}, hosts: map[string][]string{}}
	e.path = "/run/netns/" + e.name
	e.ip("netns", "add", e.name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", e.name).Run() })
	// The "public" addresses live on the namespace's loopback (no dummy
	// interfaces in this kernel): they are local there and nowhere else.
	e.ip("-n", e.name, "link", "set", "lo", "up")
	for _, a := range []string{upAllowed, upDenied, upRaw, upDNS, upInternal, upSecret, upOther, upMetadata} {
		e.ip("-n", e.name, "addr", "add", a+"/32", "dev", "lo")
	}
	e.ip("-n", e.name, "addr", "add", upV6+"/128", "dev", "lo", "nodad")
	for _, a := range []string{upAllowed, upDenied, upRaw, upInternal, upMetadata, upV6} {
		e.serveHTTP(a)
	}
	// Other resolvers, over TCP (53) and DoT (853): the gateway's DNS is
	// the only one a sandbox may use.
	e.serveCanary(upDNS, "53")
	e.serveCanary(upDNS, "853")
	pc := e.listen(func() (any, error) { return net.ListenPacket("udp", upDNS+":53") }).(net.PacketConn)
	e.dns = dnstest.Start(pc, map[string][]netip.Addr{
		"allowed.test":    {netip.MustParseAddr(upAllowed)},
		"denied.test":     {netip.MustParseAddr(upDenied)},
		"internal.test":   {netip.MustParseAddr(upInternal)},
		"api.secret.test": {netip.MustParseAddr(upSecret)},
		"api.other.test":  {netip.MustParseAddr(upOther)},
	})
	t.Cleanup(e.dns.Close)
	return e
}

func (e *egressNet) ip(args ...string) {
	e.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		e.t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
}

// listen runs open with the calling thread inside the namespace: the socket
// it creates belongs there for its life.
func (e *egressNet) listen(open func() (any, error)) any {
	e.t.Helper()
	v, err := testenv.InNetns(e.path, open)
	if err != nil {
		e.t.Fatalf("listen in %s: %v", e.name, err)
	}
	return v
}

// serveHTTP serves on addr:80 in the namespace, counting requests in
// e.hits. GET /redirect answers a 302 to the metadata address.
func (e *egressNet) serveHTTP(addr string) {
	ln := e.listen(func() (any, error) { return net.Listen("tcp", net.JoinHostPort(addr, "80")) }).(net.Listener)
	n := &atomic.Int64{}
	e.hits[addr] = n
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		e.mu.Lock()
		e.hosts[addr] = append(e.hosts[addr], r.Host)
		e.mu.Unlock()
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://"+upMetadata+"/latest/meta-data/", http.StatusFound)
			return
		}
		fmt.Fprintf(w, "upstream %s host %s", addr, r.Host)
	})}
	go srv.Serve(ln)
	e.t.Cleanup(func() { srv.Close() })
}

// serveCanary listens on addr:port in the namespace and says "canary" to
// whoever connects; e.canaries counts them. None may.
func (e *egressNet) serveCanary(addr, port string) {
	hp := net.JoinHostPort(addr, port)
	ln := e.listen(func() (any, error) { return net.Listen("tcp", hp) }).(net.Listener)
	n := &atomic.Int64{}
	e.canaries[hp] = n
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			fmt.Fprintf(c, "canary %s\n", hp)
			c.Close()
		}
	}()
	e.t.Cleanup(func() { ln.Close() })
}

// addHostCanaries gives the namespace each of the host's addresses, with a
// canary on each port: the gateway dials through this namespace, so a
// connection to a host address that the gateway let through would land
// here.
func (e *egressNet) addHostCanaries(addrs, ports []string) {
	for _, a := range addrs {
		e.ip("-n", e.name, "addr", "add", a+"/32", "dev", "lo")
		for _, p := range ports {
			e.serveCanary(a, p)
		}
	}
}

func (e *egressNet) serverFlags() []string {
	return []string{"--egress-netns", e.path, "--dns-upstream", upDNS + ":53"}
}

// createWithEgress creates an ns sandbox of the minimal template with the
// given egress policy.
func (in *instance) createWithEgress(runtime string, policy map[string]any) sandbox {
	in.t.Helper()
	var sb struct {
		sandbox
		Message string `json:"message"`
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": runtime, "memory_mib": 256, "egress": policy}, &sb)
		if code == http.StatusCreated {
			return sb.sandbox
		}
		// A node offers vm once its guest kernel is ready.
		if code != http.StatusServiceUnavailable || runtime != "vm" || time.Now().After(deadline) {
			in.t.Fatalf("create: HTTP %d %s\n%s", code, sb.Message, in.logs())
		}
		time.Sleep(time.Second)
	}
}

// httpGet sends one HTTP/1.1 GET to addr (HOST:PORT) with the given Host
// header from inside the sandbox, with busybox nc (the minimal template's
// static busybox wget cannot run there), and returns the raw response.
func (in *instance) httpGet(id, addr, host string) execResult {
	in.t.Helper()
	h, p, _ := net.SplitHostPort(addr)
	return in.sh(id, fmt.Sprintf(`printf 'GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' | nc -w 10 %s %s`, host, h, p))
}

// sh runs a shell line in the sandbox.
func (in *instance) sh(id, line string) execResult {
	in.t.Helper()
	return in.exec(id, "/bin/sh", "-c", line)
}

func TestEgressPolicy(t *testing.T) {
	e := newEgressNet(t)
	in := startServerWith(t, t.TempDir(), e.serverFlags()...)
	testEgressPolicy(t, e, in, "ns")
}

// TestEgressPolicyVM: the same through a microVM's virtio-net and QEMU's
// stream socket.
func TestEgressPolicyVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
	e := newEgressNet(t)
	in := startServerWith(t, t.TempDir(), e.serverFlags()...)
	testEgressPolicy(t, e, in, "vm")
}

func testEgressPolicy(t *testing.T, e *egressNet, in *instance, runtime string) {
	sb := in.createWithEgress(runtime, map[string]any{"allow_internet": false, "allow": map[string]any{"domains": []string{"allowed.test"}}})

	if r := in.sh(sb.ID, "cat /etc/resolv.conf; ip -4 addr show eth0"); !strings.Contains(r.Stdout, "nameserver 10.0.2.3") || !strings.Contains(r.Stdout, "10.0.2.15/24") {
		t.Fatalf("sandbox network: %+v", r)
	}
	// The allowed domain resolves through the gateway and is reachable.
	if r := in.sh(sb.ID, "nslookup allowed.test 10.0.2.3"); r.ExitCode != 0 || !strings.Contains(r.Stdout, upAllowed) {
		t.Fatalf("nslookup allowed.test: %+v", r)
	}
	r := in.httpGet(sb.ID, upAllowed+":80", "allowed.test")
	if !strings.Contains(r.Stdout, "upstream "+upAllowed+" host allowed.test") {
		t.Fatalf("GET allowed.test: %+v\n%s", r, in.logs())
	}
	// Denied: a name outside the policy does not even resolve; its address,
	// a raw address, a private one, the metadata address, the host and the
	// gateway are refused; the Host must match the allowed domain.
	if r := in.sh(sb.ID, "nslookup denied.test 10.0.2.3"); r.ExitCode == 0 && strings.Contains(r.Stdout, upDenied) {
		t.Errorf("denied.test resolved: %+v", r)
	}
	if e.dns.Queries("denied.test") != 0 {
		t.Errorf("the gateway asked upstream for denied.test")
	}
	for _, target := range []string{
		upDenied + ":80", upRaw + ":80", upInternal + ":80", "169.254.169.254:80", "10.0.2.2:80", "10.0.2.3:53",
	} {
		if r := in.httpGet(sb.ID, target, "allowed.test"); r.ExitCode == 0 || strings.Contains(r.Stdout, "upstream") {
			t.Errorf("reached %s: %+v", target, r)
		}
	}
	if r := in.httpGet(sb.ID, upAllowed+":80", "denied.test"); strings.Contains(r.Stdout, "upstream") {
		t.Errorf("Host denied.test on the allowed address: reached: %+v", r)
	}
	// The allowed upstream redirects to the metadata address; the sandbox
	// follows: refused (the metadata server counts in e.hits).
	r = in.sh(sb.ID, `printf 'GET /redirect HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n' | nc -w 10 `+upAllowed+` 80`)
	if !strings.Contains(r.Stdout, "302 Found") || !strings.Contains(r.Stdout, "Location: http://"+upMetadata+"/") {
		t.Fatalf("GET /redirect on allowed.test: %+v", r)
	}
	for _, host := range []string{upMetadata, "allowed.test"} {
		if r := in.sh(sb.ID, `printf 'GET /latest/meta-data/ HTTP/1.1\r\nHost: `+host+`\r\nConnection: close\r\n\r\n' | nc -w 10 `+upMetadata+` 80`); strings.Contains(r.Stdout, "upstream") {
			t.Errorf("followed the redirect to the metadata address (Host %s): %+v", host, r)
		}
	}
	// Raw sockets do not bypass the gateway: an ICMP echo (busybox ping
	// opens a raw socket) to an allowed address gets no answer.
	// (An ns sandbox has no raw sockets at all: busybox ping says
	// "permission denied" and sends nothing.)
	r = in.sh(sb.ID, "ping -c 1 -W 2 "+upAllowed)
	if r.ExitCode == 0 {
		t.Errorf("ping through the gateway answered: %+v", r)
	}
	rawSockets := !strings.Contains(r.Stderr, "permission denied")

	// A sandbox open to the internet: what the policy would let through is
	// still refused on the paths around it.
	open := in.createWithEgress(runtime, map[string]any{"allow_internet": true})
	testPathsAroundGateway(t, e, in, open.ID)

	// Another sandbox: every sandbox has the same address on a link of its
	// own, so there is no address that leads to a neighbour. One listens;
	// the other, at that address, reaches only itself.
	in.sh(open.ID, "(nc -ll -p 9000 -e echo neighbour </dev/null >/dev/null 2>&1 &)")
	// The listener works: its own sandbox reaches it.
	if r := in.sh(open.ID, "for i in 1 2 3 4 5 6 7 8 9 10; do nc -w 2 127.0.0.1 9000 </dev/null && exit 0; sleep 0.2; done; exit 1"); !strings.Contains(r.Stdout, "neighbour") {
		t.Fatalf("the neighbour's listener does not answer locally: %+v", r)
	}
	for _, target := range []string{"10.0.2.15:9000", "10.0.2.2:9000"} {
		if r := in.sh(sb.ID, "nc -w 3 "+strings.Replace(target, ":", " ", 1)+" </dev/null"); strings.Contains(r.Stdout, "neighbour") {
			t.Errorf("reached another sandbox at %s: %+v", target, r)
		}
	}
	// Long, tunnel-shaped names are refused before they reach upstream.
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + ".allowed.test"
	in.sh(sb.ID, "nslookup "+long+" 10.0.2.3")
	if e.dns.Queries(long) != 0 {
		t.Errorf("a tunnel-shaped name reached the upstream DNS")
	}
	for addr, n := range e.hits {
		if addr != upAllowed && n.Load() != 0 {
			t.Errorf("upstream %s got %d requests; the policy refuses it", addr, n.Load())
		}
	}
	if got := e.hits[upAllowed].Load(); got != 2 {
		t.Errorf("allowed upstream got %d requests, want 2, GET / and GET /redirect (the mismatched Host must not reach it)", got)
	}
	for hp, n := range e.canaries {
		if n.Load() != 0 {
			t.Errorf("the canary at %s accepted %d connections", hp, n.Load())
		}
	}
	// Each refusal was counted under its reason, in the node's metrics.
	counts := in.gatewayCounters(t)
	reasons := []string{"policy", "host_mismatch", "gateway_address", "dns_over_tcp", "dns_other_resolver", "host_address"}
	if rawSockets {
		reasons = append(reasons, "icmp")
	}
	// A guest kernel with IPv6 on eth0 (a link-local address) sent IPv6
	// frames for the fe80:: attempts: each dropped at the link, counted.
	if r := in.sh(open.ID, "cat /proc/net/if_inet6"); strings.Contains(r.Stdout, "eth0") {
		reasons = append(reasons, "ipv6")
	}
	for _, reason := range reasons {
		if counts[reason] == 0 {
			t.Errorf("no %s refusal counted in the node's metrics: %v", reason, counts)
		}
	}

	// Every request on a keep-alive flow is decided, not only the first: a
	// second request naming another host on the connection allowed for
	// allowed.test closes it before it reaches the upstream (domain
	// fronting on a shared address), whether it waits for the first
	// answer or is pipelined behind it; a flow of allowed requests works.
	before := len(e.hostsAt(upAllowed))
	for name, line := range map[string]string{
		"keep-alive": `(printf 'GET /1 HTTP/1.1\r\nHost: allowed.test\r\n\r\n'; sleep 1; printf 'GET /2 HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n'; sleep 2) | nc -w 10 ` + upAllowed + ` 80`,
		"pipelined":  `printf 'GET /1 HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET http://denied.test/ HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n' | nc -w 10 ` + upAllowed + ` 80`,
		"allowed":    `printf 'GET /1 HTTP/1.1\r\nHost: allowed.test\r\n\r\nPOST /2 HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /3 HTTP/1.1\r\nHost: allowed.test:80\r\nConnection: close\r\n\r\n' | nc -w 10 ` + upAllowed + ` 80`,
	} {
		r := in.sh(sb.ID, line)
		want := 1
		if name == "allowed" {
			want = 3
		}
		if got := strings.Count(r.Stdout, "upstream "+upAllowed+" host allowed.test"); got != want || strings.Contains(r.Stdout, "denied.test") {
			t.Errorf("%s: %d answers from allowed.test, want %d (and none for denied.test): %+v", name, got, want, r)
		}
	}
	if got := e.hostsAt(upAllowed)[before:]; len(got) != 5 || slices.Contains(got, "denied.test") {
		t.Errorf("Hosts that reached %s on the keep-alive flows: %q, want 5 requests for allowed.test", upAllowed, got)
	}

	// A live update opens the raw address without a restart.
	var out map[string]any
	if code := in.do("PUT", "/v1/sandboxes/"+sb.ID+"/egress", map[string]any{"allow_internet": false, "allow": map[string]any{"cidrs": []string{upRaw + "/32"}}}, &out); code != http.StatusOK {
		t.Fatalf("PUT egress: HTTP %d %v", code, out)
	}
	if r := in.httpGet(sb.ID, upRaw+":80", upRaw); !strings.Contains(r.Stdout, "upstream "+upRaw) {
		t.Errorf("after the update, GET %s: %+v", upRaw, r)
	}
}

// testPathsAroundGateway runs, in sandbox id whose policy allows the
// internet, the connections the gateway refuses whatever the policy: IPv6
// of every kind (a server listens at upV6), the metadata address, other
// resolvers, and the host's addresses on a sample of ports that includes
// the server's own (a canary listens on each, in the egress namespace the
// gateway dials through).
func testPathsAroundGateway(t *testing.T, e *egressNet, in *instance, id string) {
	t.Helper()
	// A guest root configures IPv6 itself: a global address and a default
	// route on the link. The gateway has no IPv6, so nothing answers.
	// (An IPv4-mapped destination, ::ffff:169.254.169.254, leaves the
	// guest's kernel as IPv4 and meets the IPv4 policy.)
	// An ns sandbox's root cannot (its network namespace is not its own:
	// EPERM) and reaches IPv6 link-local only; a VM's root can.
	if r := in.sh(id, "ip -6 addr add 2001:db8:5::15/64 dev eth0 && ip -6 route add default dev eth0"); r.ExitCode != 0 {
		if !strings.Contains(r.Stderr, "not permitted") {
			t.Errorf("configure IPv6 in the sandbox: %+v", r)
		}
		t.Logf("the sandbox cannot configure IPv6 (%s): only link-local IPv6 is tried on the link", strings.TrimSpace(r.Stderr))
	}
	for _, a := range []string{upV6, "::ffff:" + upMetadata, "64:ff9b::1400:a", "2002:1400:a::1", "fe80::1%eth0", "fd00:ec2::254"} {
		if r := in.httpGet(id, net.JoinHostPort(a, "80"), "allowed.test"); strings.Contains(r.Stdout, "upstream") {
			t.Errorf("reached %s over IPv6: %+v", a, r)
		}
	}
	if r := in.httpGet(id, upMetadata+":80", upMetadata); strings.Contains(r.Stdout, "upstream") {
		t.Errorf("reached the metadata address under allow_internet: %+v", r)
	}
	// Other resolvers: UDP to one (a real DNS server listens there), DNS
	// over TCP and DoT.
	in.sh(id, "nslookup direct.allowed.test "+upDNS)
	if n := e.dns.Queries("direct.allowed.test"); n != 0 {
		t.Errorf("a query sent to another resolver reached it (%d)", n)
	}
	for _, p := range []string{"53", "853"} {
		if r := in.sh(id, "nc -w 3 "+upDNS+" "+p+" </dev/null"); strings.Contains(r.Stdout, "canary") {
			t.Errorf("reached another resolver on TCP %s: %+v", p, r)
		}
	}
	// The host, on every sampled port.
	ports := append(append([]string(nil), canaryPorts...), in.listenPorts(t)...)
	addrs := hostAddrs(t)
	e.addHostCanaries(addrs, ports)
	for _, a := range addrs {
		script := "for p in " + strings.Join(ports, " ") + "; do printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 " + a + " $p; done"
		if r := in.sh(id, script); strings.Contains(r.Stdout, "canary") || strings.Contains(r.Stdout, "HTTP/") {
			t.Errorf("reached the host at %s: %+v", a, r)
		}
	}
}

// gatewayCounters reads the gateway's decision counters from the node's
// metrics.
func (in *instance) gatewayCounters(t *testing.T) map[string]uint64 {
	t.Helper()
	return metricValues(in.nodeMetrics(t), "space_gateway_flows_total", "decision")
}

// nodeMetrics is the node's metrics text (the node-api's unix socket, with
// the node token).
func (in *instance) nodeMetrics(t *testing.T) string {
	t.Helper()
	token, err := os.ReadFile(filepath.Join(in.dataDir, "node.token"))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(in.dataDir, "run", "node.sock"))
	}}}
	req, _ := http.NewRequest("GET", "http://node/node/v1/metrics", nil)
	req.Header.Set("X-Space-Node-Token", strings.TrimSpace(string(token)))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("node metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("node metrics: HTTP %d %s", resp.StatusCode, body)
	}
	return string(body)
}

// metricValues is the values of metric name in a metrics text by its one
// label's value: metricValues(m, "space_gateway_flows_total", "decision").
func metricValues(metrics, name, label string) map[string]uint64 {
	out := map[string]uint64{}
	prefix := name + "{" + label + `="`
	for _, line := range strings.Split(metrics, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		v, value, ok := strings.Cut(rest, `"} `)
		if n, err := strconv.ParseUint(value, 10, 64); ok && err == nil {
			out[v] = n
		}
	}
	return out
}

// listenPorts returns the TCP ports the server process listens on (the
// control plane's and the node-api's, when it has TCP ones).
func (in *instance) listenPorts(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ss", "-Htlnp").Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	var ports []string
	tag := fmt.Sprintf("pid=%d,", in.cmd.Process.Pid)
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.Contains(line, tag) {
			continue
		}
		if i := strings.LastIndexByte(f[3], ':'); i >= 0 {
			ports = append(ports, f[3][i+1:])
		}
	}
	if len(ports) == 0 {
		t.Fatalf("the server listens on no TCP port?\n%s", out)
	}
	return ports
}

// hostAddrs returns this machine's IPv4 addresses outside loopback.
func hostAddrs(t *testing.T) []string {
	as, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
			out = append(out, p.Addr().String())
		}
	}
	return out
}

package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/gateway/dnsgw/dnstest"
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
)

func newEgressNet(t *testing.T) *egressNet {
	t.Helper()
	var b [4]byte
	rand.Read(b[:])
	os.MkdirAll("/run/netns", 0o755)
	e := &egressNet{t: t, name: "spc-egress-" + hex.EncodeToString(b[:]), hits: map[string]*atomic.Int64{}, hosts: map[string][]string{}}
	e.path = "/run/netns/" + e.name
	e.ip("netns", "add", e.name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", e.name).Run() })
	// The "public" addresses live on the namespace's loopback (no dummy
	// interfaces in this kernel): they are local there and nowhere else.
	e.ip("-n", e.name, "link", "set", "lo", "up")
	for _, a := range []string{upAllowed, upDenied, upRaw, upDNS, upInternal, upSecret, upOther} {
		e.ip("-n", e.name, "addr", "add", a+"/32", "dev", "lo")
	}
	for _, a := range []string{upAllowed, upDenied, upRaw, upInternal} {
		e.serveHTTP(a)
	}
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
	type result struct {
		v   any
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		target, err := unix.Open(e.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer unix.Close(target)
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, err}
			return
		}
		v, err := open()
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{v, err}
	}()
	r := <-ch
	if r.err != nil {
		e.t.Fatalf("listen in %s: %v", e.name, r.err)
	}
	return r.v
}

func (e *egressNet) serveHTTP(addr string) {
	ln := e.listen(func() (any, error) { return net.Listen("tcp", addr+":80") }).(net.Listener)
	n := &atomic.Int64{}
	e.hits[addr] = n
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		e.mu.Lock()
		e.hosts[addr] = append(e.hosts[addr], r.Host)
		e.mu.Unlock()
		fmt.Fprintf(w, "upstream %s host %s", addr, r.Host)
	})}
	go srv.Serve(ln)
	e.t.Cleanup(func() { srv.Close() })
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
	// Raw sockets do not bypass the gateway: an ICMP echo (busybox ping
	// opens a raw socket) to an allowed address gets no answer, and there is
	// no IPv6 route at all.
	if r := in.sh(sb.ID, "ping -c 1 -W 2 "+upAllowed); r.ExitCode == 0 {
		t.Errorf("ping through the gateway answered: %+v", r)
	}
	if r := in.sh(sb.ID, "nc -w 3 2001:db8::1 80 </dev/null"); r.ExitCode == 0 {
		t.Errorf("an IPv6 connection succeeded: %+v", r)
	}
	// The host: every address of the node (here the test machine's) is
	// refused, whatever the policy.
	for _, a := range hostAddrs(t) {
		if r := in.httpGet(sb.ID, net.JoinHostPort(a, "80"), a); strings.Contains(r.Stdout, "HTTP/") {
			t.Errorf("reached the host at %s: %+v", a, r)
		}
	}
	// Another sandbox: every sandbox has the same address on a link of its
	// own, so there is no address that leads to a neighbour. One listens;
	// the other, at that address, reaches only itself.
	if runtime == "ns" {
		other := in.createWithEgress(runtime, map[string]any{"allow_internet": true})
		in.sh(other.ID, "(nc -ll -p 9000 -e echo neighbour </dev/null >/dev/null 2>&1 &)")
		// The listener works: its own sandbox reaches it.
		if r := in.sh(other.ID, "for i in 1 2 3 4 5 6 7 8 9 10; do nc -w 2 127.0.0.1 9000 </dev/null && exit 0; sleep 0.2; done; exit 1"); !strings.Contains(r.Stdout, "neighbour") {
			t.Fatalf("the neighbour's listener does not answer locally: %+v", r)
		}
		for _, target := range []string{"10.0.2.15:9000", "10.0.2.2:9000"} {
			if r := in.sh(sb.ID, "nc -w 3 "+strings.Replace(target, ":", " ", 1)+" </dev/null"); strings.Contains(r.Stdout, "neighbour") {
				t.Errorf("reached another sandbox at %s: %+v", target, r)
			}
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
	if got := e.hits[upAllowed].Load(); got != 1 {
		t.Errorf("allowed upstream got %d requests, want 1 (the mismatched Host must not reach it)", got)
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

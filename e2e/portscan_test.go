package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// TestGatewayPortScan (catalogue A-4, the T2 scan): from inside an ns
// sandbox, every TCP port of the gateway, of its DNS address and of each
// of the host's own addresses is refused, and of every UDP port of them
// only the gateway's DNS answers; a canary the host listens with on its own
// addresses (TCP and UDP) sees nothing of the sandbox. The sandbox may
// reach the internet, and its policy names the host's addresses: what it
// must not reach is the host.
func TestGatewayPortScan(t *testing.T) {
	hostAddrs := hostIPv4s(t)
	if len(hostAddrs) == 0 {
		t.Skip("the host has no non-loopback IPv4 address to scan")
	}
	var canaryHits atomic.Int64
	for _, a := range hostAddrs {
		ln, err := net.Listen("tcp4", net.JoinHostPort(a, "0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go countAccepts(ln, &canaryHits)
		pc, err := net.ListenPacket("udp4", net.JoinHostPort(a, "0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				_, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				canaryHits.Add(1)
			}
		}()
	}

	in := startServer(t, t.TempDir())
	// The tenant's policy allows the host's addresses by name: the
	// gateway refuses them all the same.
	cidrs := make([]string, len(hostAddrs))
	for i, a := range hostAddrs {
		cidrs[i] = a + "/32"
	}
	sb := in.createWithEgress("ns", map[string]any{"allow_internet": true, "allow": map[string]any{"cidrs": cidrs}})
	if code := in.do("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/usr/local/bin/portscan", buildTestBinary(t, "portscan"), nil); code/100 != 2 {
		t.Fatalf("upload portscan: HTTP %d", code)
	}
	in.sh(sb.ID, "chmod 755 /usr/local/bin/portscan")
	targets := strings.Join(append([]string{"10.0.2.2", "10.0.2.3"}, hostAddrs...), ",")
	r := in.sh(sb.ID, "portscan -c 64 -timeout 3s -tcp "+targets+" -udp "+targets)
	if r.ExitCode != 0 {
		t.Fatalf("portscan: %+v", r)
	}
	var res struct {
		TCPOpen     []string `json:"tcp_open"`
		TCPTimeouts int      `json:"tcp_timeouts"`
		TCPRefused  int      `json:"tcp_refused"`
		TCPOther    []string `json:"tcp_other"`
		UDPSent     int      `json:"udp_sent"`
		UDPAnswered []string `json:"udp_answered"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
		t.Fatalf("portscan output %q: %v", r.Stdout, err)
	}
	t.Logf("scanned %d addresses: %d TCP ports refused, %d timed out, %d UDP probes sent; answered: %v", 2+len(hostAddrs), res.TCPRefused, res.TCPTimeouts, res.UDPSent, res.UDPAnswered)
	want := 65535 * (2 + len(hostAddrs))
	if len(res.TCPOpen) != 0 || res.TCPRefused != want || len(res.TCPOther) != 0 {
		t.Errorf("TCP: open %v, refused %d of %d, timed out %d, other %v; want every port refused", res.TCPOpen, res.TCPRefused, want, res.TCPTimeouts, res.TCPOther)
	}
	if res.UDPSent != want || !slices.Equal(res.UDPAnswered, []string{"10.0.2.3:53"}) {
		t.Errorf("UDP: %d probes sent of %d, answered by %v; want only the gateway's DNS, 10.0.2.3:53", res.UDPSent, want, res.UDPAnswered)
	}
	if n := canaryHits.Load(); n != 0 {
		t.Errorf("the host's canaries on %v saw %d connections or datagrams from the sandbox", hostAddrs, n)
	}
	// The gateway still serves the sandbox after the scan.
	if code := in.do("GET", "/v1/sandboxes/"+sb.ID, nil, nil); code != http.StatusOK {
		t.Errorf("the sandbox after the scan: HTTP %d", code)
	}
	if r := in.sh(sb.ID, "echo ok"); strings.TrimSpace(r.Stdout) != "ok" {
		t.Errorf("exec after the scan: %+v", r)
	}
}

// hostIPv4s are the host's non-loopback IPv4 addresses.
func hostIPv4s(t *testing.T) []string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			out = append(out, n.IP.String())
		}
	}
	return out
}

// buildTestBinary builds the static program ./testdata/NAME for a sandbox.
func buildTestBinary(t *testing.T, name string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-tags", "netgo,osusergo", "-o", out, "./testdata/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

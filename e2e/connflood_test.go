package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestConnectionFlood (catalogue C-5): against a real server, node, gateway
// and ns guests, one sandbox opens connections as fast as it can — up to
// 100,000 attempts — to an upstream it is allowed to reach, and a client
// opens TCP tunnels to another sandbox's exposed port through ingress until
// refused and then some. The gateway's per-sandbox flow cap refuses the
// sandbox's connections past it (a RST, counted flow_limit in
// space_gateway_flows_total), the node's per-execution stream cap refuses
// the tunnels past it (429 too_many_streams, counted port_tcp in
// space_node_streams_refused_total); meanwhile a neighbour sandbox's exec,
// its own upstream connection and its own tunnel work, the server's open
// fds stay under a bound, and once the flood ends they come back to the
// baseline. It runs beside TestConnectionFloodVM (each has its own server
// and network namespace).
func TestConnectionFlood(t *testing.T) {
	t.Parallel()
	testConnectionFlood(t, connFlood{runtime: "ns", dials: 100000, tunnels: 100000})
}

// TestConnectionFloodVM: the same floods from and to vm sandboxes (the
// flooding sandbox and the one whose port is flooded are microVMs, the
// neighbour an ns sandbox), shorter for TCG: 5,000 connection attempts and
// 1,100 tunnels, so that both caps are reached and held.
func TestConnectionFloodVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
	t.Parallel()
	testConnectionFlood(t, connFlood{runtime: "vm", dials: 5000, tunnels: 1100})
}

// connFlood is one run of testConnectionFlood: the runtime of the flooding
// sandbox and of the one whose port is flooded, how many connections the
// first attempts, and at most how many tunnels the client opens (it stops
// 1,000 refusals after the first).
type connFlood struct {
	runtime        string
	dials, tunnels int
}

func testConnectionFlood(t *testing.T, fc connFlood) {
	e := newEgressNet(t)
	upstream := net.JoinHostPort(upAllowed, "9000")
	ln := e.listen(func() (any, error) { return net.Listen("tcp", upstream) }).(net.Listener)
	t.Cleanup(func() { ln.Close() })
	// An echo server holding the connections it accepts, up to 2,048 (so
	// that a gateway without its cap fails this test, not its fd table).
	var echoing atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if echoing.Add(1) > 2048 {
				echoing.Add(-1)
				c.Close()
				continue
			}
			go func() {
				defer echoing.Add(-1)
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	// The tenant's stream cap (1,024 across its sandboxes, tunnels included;
	// e2e.TestStreamFlood) would refuse the ingress flood first, and the
	// neighbour's tunnel with it (one tenant here): raised, so that what
	// this test holds is the node's per-execution cap behind it.
	in := startServerWith(t, t.TempDir(), append(e.serverFlags(), "--max-tenant-streams", "8192")...)
	internet := map[string]any{"allow_internet": true}
	flooder := in.createWithEgress(fc.runtime, internet)
	target := in.createWithEgress(fc.runtime, internet)
	neighbour := in.createWithEgress("ns", internet)
	t.Logf("sandboxes created (%s)", fc.runtime)
	defer in.delete(flooder.ID)
	defer in.delete(target.ID)
	defer in.delete(neighbour.ID)
	flood := buildTestBinary(t, "connflood")
	for _, sb := range []sandbox{flooder, target, neighbour} {
		if code := in.do("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/usr/local/bin/connflood", flood, nil); code/100 != 2 {
			t.Fatalf("upload connflood: HTTP %d", code)
		}
		if r := in.sh(sb.ID, "chmod 755 /usr/local/bin/connflood"); r.ExitCode != 0 {
			t.Fatalf("chmod connflood: %+v", r)
		}
	}
	for _, sb := range []sandbox{target, neighbour} {
		if r := in.sh(sb.ID, "(connflood serve :2222 </dev/null >/dev/null 2>&1 &)"); r.ExitCode != 0 {
			t.Fatalf("start the echo server: %+v", r)
		}
		var p servicePort
		if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/ports", map[string]any{"port": 2222, "protocol": "tcp"}, &p); code != http.StatusCreated {
			t.Fatalf("expose 2222/tcp: HTTP %d", code)
		}
	}
	// The neighbour works before the flood, and its figures idle.
	neighbourWorks := func(when string) {
		t.Helper()
		if r := in.sh(neighbour.ID, "echo via-gateway | nc -w 3 "+upAllowed+" 9000"); !strings.Contains(r.Stdout, "via-gateway") {
			t.Fatalf("%s: the neighbour's own upstream connection: %+v", when, r)
		}
		c, err := in.tunnel(neighbour.ID, 2222)
		if err != nil {
			t.Fatalf("%s: the neighbour's own tunnel: %v", when, err)
		}
		defer c.Close()
		fmt.Fprint(c, "via-ingress\n")
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "via-ingress\n" {
			t.Fatalf("%s: echo through the neighbour's tunnel: %q %v", when, line, err)
		}
	}
	neighbourWorks("before the flood")
	idle := in.execTimes(neighbour.ID, 30)
	baseline := in.openFDs(t)
	metricsBefore := in.nodeMetrics(t)

	// (a) The sandbox floods its gateway: every accepted connection is held.
	if r := in.sh(flooder.ID, fmt.Sprintf("(connflood dial %s %d 25s", upstream, fc.dials)+" </dev/null >/tmp/flood.json 2>/tmp/flood.err & echo $! >/tmp/flood.pid)"); r.ExitCode != 0 {
		t.Fatalf("start the flood: %+v", r)
	}
	var got struct {
		Attempts, Accepted, Refused, Other int64
		FirstErr                           string `json:"first_other_error"`
		Seconds                            float64
	}
	peak := 0
	for deadline := time.Now().Add(45 * time.Second); ; {
		peak = max(peak, in.openFDs(t))
		r := in.sh(flooder.ID, "cat /tmp/flood.json")
		if json.Unmarshal([]byte(r.Stdout), &got) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flood reported nothing: %+v %s", r, in.sh(flooder.ID, "cat /tmp/flood.err").Stdout)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("egress flood: %d attempts in %.1fs: %d accepted, %d refused, %d other (%s)", got.Attempts, got.Seconds, got.Accepted, got.Refused, got.Other, got.FirstErr)
	const flowCap = 1024 // gateway.MaxFlows
	if got.Accepted > flowCap || got.Refused == 0 {
		t.Errorf("the sandbox held %d connections and had %d refused; want at most %d held, the rest refused", got.Accepted, got.Refused, flowCap)
	}
	before := metricValues(metricsBefore, "space_gateway_flows_total", "decision")["flow_limit"]
	if n := in.gatewayCounters(t)["flow_limit"]; n-before < uint64(got.Refused) {
		t.Errorf("space_gateway_flows_total{decision=\"flow_limit\"} rose by %d, want the %d refusals", n-before, got.Refused)
	}

	// (b) A client floods the other sandbox's exposed port through ingress
	// until refused, then 1,000 times more.
	var tunnels []net.Conn
	defer func() {
		for _, c := range tunnels {
			c.Close()
		}
	}()
	refused, lastErr := 0, error(nil)
	for i := 0; i < fc.tunnels && refused < 1000; i++ {
		c, err := in.tunnel(target.ID, 2222)
		if err != nil {
			refused++
			lastErr = err
			continue
		}
		if refused > 0 {
			c.Close()
			t.Fatalf("tunnel %d accepted after %d refusals", i+1, refused)
		}
		tunnels = append(tunnels, c)
	}
	t.Logf("ingress flood: %d tunnels held, %d refused (%v)", len(tunnels), refused, lastErr)
	const streamCap = 1024 // node Config.MaxStreamsPerExecution
	if len(tunnels) > streamCap || refused == 0 || !strings.Contains(fmt.Sprint(lastErr), "429") || !strings.Contains(fmt.Sprint(lastErr), "too_many_streams") {
		t.Errorf("ingress held %d tunnels, refused %d (%v); want at most %d, then 429 too_many_streams", len(tunnels), refused, lastErr, streamCap)
	}
	if n := metricValues(in.nodeMetrics(t), "space_node_streams_refused_total", "surface")["port_tcp"]; n < uint64(refused) {
		t.Errorf("space_node_streams_refused_total{surface=\"port_tcp\"} is %d, want the %d refusals", n, refused)
	}

	// Meanwhile the neighbour works; the server's fds are bounded.
	neighbourWorks("during the flood")
	during := in.execTimes(neighbour.ID, 30)
	peak = max(peak, in.openFDs(t))
	t.Logf("neighbour exec p99 %.1f ms idle, %.1f ms during the flood (%.2f×); server fds %d before, peak %d",
		percentileMS(idle, 0.99), percentileMS(during, 0.99), percentileMS(during, 0.99)/percentileMS(idle, 0.99), baseline, peak)
	// Each held flow is one upstream socket; each tunnel is the client's
	// connection and both ends of the control plane's connection to the
	// node (one process here): the caps bound them.
	if bound := baseline + flowCap + 3*streamCap + 256; peak > bound {
		t.Errorf("the server held %d fds at the flood's peak, over its bound %d (baseline %d)", peak, bound, baseline)
	}

	// After the flood everything is released.
	for _, c := range tunnels {
		c.Close()
	}
	tunnels = nil
	if r := in.sh(flooder.ID, "kill $(cat /tmp/flood.pid)"); r.ExitCode != 0 {
		t.Fatalf("stop the flood: %+v", r)
	}
	var now int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if now = in.openFDs(t); now <= baseline+32 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server holds %d fds 30 s after the flood ended, baseline %d", now, baseline)
		}
	}
	t.Logf("server fds %d after the flood", now)
	neighbourWorks("after the flood")
	if c, err := in.tunnel(target.ID, 2222); err != nil {
		t.Errorf("the flooded port after the flood: %v", err)
	} else {
		c.Close()
	}
}

// tunnel opens a space-tcp tunnel to the sandbox's exposed port through
// ingress; an error names the refusal's status and body.
func (in *instance) tunnel(id string, port int) (net.Conn, error) {
	c, err := net.Dial("tcp", strings.TrimPrefix(in.url, "http://"))
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET /v1/sandboxes/%s/ports/%d/tcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: space-tcp\r\n\r\n", id, port, in.key)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		c.Close()
		return nil, fmt.Errorf("HTTP %d %s", resp.StatusCode, body)
	}
	c.SetDeadline(time.Time{})
	return &bufferedConn{Conn: c, r: br}, nil
}

// bufferedConn reads through the reader that read the upgrade's answer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// execTimes times n execs of true in sandbox id.
func (in *instance) execTimes(id string, n int) []time.Duration {
	in.t.Helper()
	ds := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		var res execResult
		if code := in.do("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": []string{"true"}}, &res); code != http.StatusOK || res.ExitCode != 0 {
			in.t.Fatalf("exec true: HTTP %d %+v", code, res)
		}
		ds = append(ds, time.Since(start))
	}
	return ds
}

// openFDs counts the server process's open files (its node, gateway and
// ingress run in it).
func (in *instance) openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", in.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

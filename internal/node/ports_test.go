package node

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/gateway/gatewaytest"
	"github.com/spacesandbox/space/internal/privop"
)

// bufConn reads what a bufio.Reader already holds first.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

type refuseDialer struct{}

func (refuseDialer) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, fmt.Errorf("no upstream in this test")
}

type noResolver struct{}

func (noResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return nil, &net.DNSError{Err: "no upstream in this test", IsNotFound: true}
}

// TestServicePortIngress: HTTP to a guest port goes through the
// execution's gateway only with a capability naming this execution, this
// port and protocol http; the guest never sees the capability.
func TestServicePortIngress(t *testing.T) {
	m, err := NewManager(Config{NodeID: "node-a", DataDir: t.TempDir(), Privileged: privop.NewClient("/nonexistent"), HostBridge: "/bin/true",
		Token: "node-token", Gateway: &GatewayConfig{Dialer: refuseDialer{}, Upstream: noResolver{}}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	agreeClock(t, m)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	if err := m.SetKeys(capability.KeySetFor(1, signer)); err != nil {
		t.Fatal(err)
	}
	rec := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g8-x", SandboxID: "sb1", Generation: 8, ActivationID: "a-1", Runtime: "ns", Egress: []byte(`{"allow_internet": false}`)}}
	guest := attachTestExecution(t, m, rec)
	ln, err := guest.Listen(8080)
	if err != nil {
		t.Fatal(err)
	}
	sawCapability := make(chan bool, 16)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawCapability <- r.Header.Get(capability.Header) != ""
		fmt.Fprintf(w, "guest app: %s %s from %s", r.Method, r.URL.RequestURI(), r.RemoteAddr)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	api := httptest.NewServer(m.Handler())
	t.Cleanup(api.Close)

	id := capability.Identity{Sandbox: "sb1", Generation: 8, Node: "node-a", Substrate: "ns", Activation: "a-1"}
	mint := func(id capability.Identity, port uint16, proto string) string {
		tok, err := signer.Mint(id, capability.OpServicePort, port, proto)
		if err != nil {
			t.Fatal(err)
		}
		return capability.Encode(tok)
	}
	get := func(path, capHeader string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, api.URL+path, nil)
		req.Header.Set(TokenHeader, "node-token")
		if capHeader != "" {
			req.Header.Set(capability.Header, capHeader)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/node/v1/executions/sb1-g8-x/ports/8080/hello?x=1", mint(id, 8080, "http"))
	if code != http.StatusOK || !strings.HasPrefix(body, "guest app: GET /hello?x=1 from 10.0.2.2:") {
		t.Fatalf("ingress with the right capability: %d %q", code, body)
	}
	if <-sawCapability {
		t.Error("the guest saw the capability header")
	}
	older := id
	older.Generation = 7
	for _, c := range []struct {
		name, path, cap string
		want            int
	}{
		{"no capability", "/node/v1/executions/sb1-g8-x/ports/8080/", "", http.StatusForbidden},
		{"capability for another port", "/node/v1/executions/sb1-g8-x/ports/8080/", mint(id, 8081, "http"), http.StatusForbidden},
		{"capability for tcp", "/node/v1/executions/sb1-g8-x/ports/8080/", mint(id, 8080, "tcp"), http.StatusForbidden},
		{"capability of an older execution", "/node/v1/executions/sb1-g8-x/ports/8080/", mint(older, 8080, "http"), http.StatusConflict},
		{"bad port", "/node/v1/executions/sb1-g8-x/ports/99999/", mint(id, 8080, "http"), http.StatusBadRequest},
	} {
		if code, body := get(c.path, c.cap); code != c.want {
			t.Errorf("%s: HTTP %d %q, want %d", c.name, code, body, c.want)
		}
	}
	select {
	case <-sawCapability:
		t.Error("a refused request reached the guest")
	default:
	}
	// A raw TCP tunnel to an echo server on the guest's port 2222.
	echo, err := guest.Listen(2222)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	t.Cleanup(func() { echo.Close() })
	tunnel := func(capHeader string) (net.Conn, string) {
		c, err := net.Dial("tcp", strings.TrimPrefix(api.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /node/v1/executions/sb1-g8-x/tcp/2222 HTTP/1.1\r\nHost: node\r\n%s: node-token\r\n%s: %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\nearly", TokenHeader, capability.Header, capHeader, TCPUpgrade)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return &bufConn{Conn: c, r: br}, resp.Status
	}
	c, status := tunnel(mint(id, 2222, "tcp"))
	if !strings.HasPrefix(status, "101") {
		t.Fatalf("tunnel: %s", status)
	}
	fmt.Fprint(c, "-ping")
	got := make([]byte, len("early-ping"))
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "early-ping" {
		t.Fatalf("echo through the tunnel: %q, %v", got, err)
	}
	c.Close()
	if c, status := tunnel(mint(id, 2222, "http")); !strings.HasPrefix(status, "403") {
		t.Errorf("tunnel with an http capability: %s, want 403", status)
	} else {
		c.Close()
	}

	// A port nobody listens on: the gateway's connection is refused.
	if code, _ := get("/node/v1/executions/sb1-g8-x/ports/9090/", mint(id, 9090, "http")); code != http.StatusServiceUnavailable {
		t.Errorf("closed guest port: HTTP %d, want 503", code)
	}
}

// attachTestExecution records rec on m and attaches a test gateway link for
// it, returning the link's guest end (detached when the test ends).
func attachTestExecution(t *testing.T, m *Manager, rec *Record) *gatewaytest.Guest {
	t.Helper()
	if err := os.MkdirAll(m.records.execDir(rec.ExecID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := m.records.save(rec); err != nil {
		t.Fatal(err)
	}
	link, guest := gatewaytest.NewLink(t)
	if err := m.attachGateway(rec, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.detachGateway(rec.ExecID) })
	return guest
}

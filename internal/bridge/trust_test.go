package bridge

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	"github.com/spacesandbox/space/api/guest/v1/control/controlv1connect"
)

// fileGuest is a guest daemon's file API over an in-memory file system
// that counts the requests it serves (the real daemon would write the
// host's /etc/ssl in a test).
type fileGuest struct {
	controlv1connect.UnimplementedControlHandler
	mu    sync.Mutex
	files map[string][]byte
	reads int
	posts int
	// failWrites makes every write fail (a full guest disk).
	failWrites bool
}

func (g *fileGuest) Ready(context.Context, *connect.Request[controlv1.ReadyRequest]) (*connect.Response[controlv1.ReadyResponse], error) {
	return connect.NewResponse(&controlv1.ReadyResponse{Version: "test"}), nil
}

func (g *fileGuest) Init(context.Context, *connect.Request[controlv1.InitRequest]) (*connect.Response[controlv1.InitResponse], error) {
	return connect.NewResponse(&controlv1.InitResponse{}), nil
}

func (g *fileGuest) serveFiles(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.URL.Query().Get("username") != "root" {
		http.Error(w, "want root", http.StatusBadRequest)
		return
	}
	switch r.Method {
	case http.MethodGet:
		g.reads++
		b, ok := g.files[r.URL.Query().Get("path")]
		if !ok {
			http.Error(w, `{"code":404}`, http.StatusNotFound)
			return
		}
		w.Write(b)
	case http.MethodPost:
		g.posts++
		if g.failWrites {
			http.Error(w, `{"code":507,"message":"no space left on device"}`, http.StatusInsufficientStorage)
			return
		}
		_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || r.URL.Query().Get("path") != "" {
			http.Error(w, "want a multipart body naming its files", http.StatusBadRequest)
			return
		}
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			b, _ := io.ReadAll(part)
			g.files[partFilename(part.Header.Get("Content-Disposition"))] = b
		}
		w.Write([]byte("[]"))
	}
}

// partFilename is the guest daemon's: the filename parameter with its
// directories.
func partFilename(disposition string) string {
	_, params, _ := mime.ParseMediaType(disposition)
	return params["filename"]
}

func (g *fileGuest) counts() (reads, posts int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reads, g.posts
}

func (g *fileGuest) file(p string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return string(g.files[p])
}

// setFile changes a guest file as the sandbox's own processes could.
func (g *fileGuest) setFile(p, s string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.files[p] = []byte(s)
}

// startFileBridge runs a bridge whose guest is g and returns a client of
// the bridge's socket.
func startFileBridge(t *testing.T, g *fileGuest) *http.Client {
	t.Helper()
	hostConn, guestConn := channelPair(t)
	mux := http.NewServeMux()
	mux.Handle(controlv1connect.NewControlHandler(g))
	mux.HandleFunc("/files", g.serveFiles)
	go (&http2.Server{}).ServeConn(guestConn, &http2.ServeConnOpts{Handler: mux})
	dir := t.TempDir()
	sock := filepath.Join(dir, "bridge.sock")
	b, err := New(Config{ExecID: "e1", Socket: sock, Channel: hostConn, ExitFile: filepath.Join(dir, "exit")}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		guestConn.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("bridge did not stop")
		}
	})
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := hc.Get("http://bridge/bridge/v1/status")
		if err == nil {
			var st Status
			json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if st.Ready {
				return hc
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge not ready: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testCAPEM(t *testing.T) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandbox CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func postBridge(t *testing.T, hc *http.Client, path string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	resp, err := hc.Post("http://bridge"+path, "application/json", rd)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(msg)
}

// TestTrustAfterPrefetchIsOneGuestRequest: a trust after the warm pool's
// prefetch writes the anchor and the bundle in one guest request and reads
// nothing; the prefetched bundle serves that one trust only, a later one
// reads the guest's bundle as it is now.
func TestTrustAfterPrefetchIsOneGuestRequest(t *testing.T) {
	g := &fileGuest{files: map[string][]byte{TrustBundlePath: []byte("TEMPLATE ROOTS\n")}}
	hc := startFileBridge(t, g)
	if code, msg := postBridge(t, hc, "/bridge/v1/trust/prefetch", nil); code != http.StatusNoContent {
		t.Fatalf("prefetch: %d %s", code, msg)
	}
	r0, p0 := g.counts()
	if r0 != 1 || p0 != 0 {
		t.Fatalf("prefetch: %d reads, %d writes in the guest, want 1 and 0", r0, p0)
	}
	ca := testCAPEM(t)
	if code, msg := postBridge(t, hc, "/bridge/v1/trust", TrustRequest{CertPEM: ca}); code != http.StatusNoContent {
		t.Fatalf("trust: %d %s", code, msg)
	}
	if r, p := g.counts(); r-r0 != 0 || p-p0 != 1 {
		t.Errorf("trust after prefetch: %d reads, %d writes in the guest, want 0 and 1", r-r0, p-p0)
	}
	if got := g.file(TrustAnchorPath); got != ca {
		t.Errorf("anchor = %q, want the CA", got)
	}
	if got, want := g.file(TrustBundlePath), "TEMPLATE ROOTS\n"+ca; got != want {
		t.Errorf("bundle = %q, want %q", got, want)
	}

	// The sandbox changes its bundle; a second trust (another CA) must
	// build on that, not on the prefetched copy.
	g.setFile(TrustBundlePath, "SANDBOX'S OWN\n")
	r1, p1 := g.counts()
	ca2 := testCAPEM(t)
	if code, msg := postBridge(t, hc, "/bridge/v1/trust", TrustRequest{CertPEM: ca2}); code != http.StatusNoContent {
		t.Fatalf("second trust: %d %s", code, msg)
	}
	if r, p := g.counts(); r-r1 != 1 || p-p1 != 1 {
		t.Errorf("second trust: %d reads, %d writes in the guest, want 1 and 1", r-r1, p-p1)
	}
	if got, want := g.file(TrustBundlePath), "SANDBOX'S OWN\n"+ca2; got != want {
		t.Errorf("bundle after the second trust = %q, want %q", got, want)
	}
}

// TestTrustWithoutPrefetch: a cold start's trust reads the bundle, then
// writes both files in one request; the same CA again leaves the bundle as
// it is.
func TestTrustWithoutPrefetch(t *testing.T) {
	g := &fileGuest{files: map[string][]byte{TrustBundlePath: []byte("ROOTS")}}
	hc := startFileBridge(t, g)
	ca := testCAPEM(t)
	for range 2 {
		if code, msg := postBridge(t, hc, "/bridge/v1/trust", TrustRequest{CertPEM: ca}); code != http.StatusNoContent {
			t.Fatalf("trust: %d %s", code, msg)
		}
	}
	if r, p := g.counts(); r != 2 || p != 2 {
		t.Errorf("two trusts: %d reads, %d writes in the guest, want 2 and 2", r, p)
	}
	if got, want := g.file(TrustBundlePath), "ROOTS\n"+ca; got != want {
		t.Errorf("bundle = %q, want %q (once)", got, want)
	}
	if got := g.file(TrustAnchorPath); got != ca {
		t.Errorf("anchor = %q", got)
	}
}

// TestTrustPrefetchRefusedAfterInit: once an identity is installed the
// guest's files are the sandbox's, and a prefetch is refused.
func TestTrustPrefetchRefusedAfterInit(t *testing.T) {
	g := &fileGuest{files: map[string][]byte{TrustBundlePath: []byte("ROOTS")}}
	hc := startFileBridge(t, g)
	if code, msg := postBridge(t, hc, "/bridge/v1/init", InitRequest{SandboxID: "sb1", Generation: 1, ActivationID: "a1", Node: "n1", Substrate: "ns", Hostname: "sb1"}); code != http.StatusNoContent {
		t.Fatalf("init: %d %s", code, msg)
	}
	code, msg := postBridge(t, hc, "/bridge/v1/trust/prefetch", nil)
	if code != http.StatusConflict || !strings.Contains(msg, "identity") {
		t.Fatalf("prefetch after init: %d %s, want 409 naming the identity", code, msg)
	}
	if r, _ := g.counts(); r != 0 {
		t.Errorf("a refused prefetch read the guest %d times", r)
	}
}

// TestInitTrustsTheCA: an Init that carries the sandbox's CA has the guest
// trust it in the same bridge request (after a prefetch: one guest file
// request), and the identity is installed once both are done.
func TestInitTrustsTheCA(t *testing.T) {
	g := &fileGuest{files: map[string][]byte{TrustBundlePath: []byte("ROOTS\n")}}
	hc := startFileBridge(t, g)
	if code, msg := postBridge(t, hc, "/bridge/v1/trust/prefetch", nil); code != http.StatusNoContent {
		t.Fatalf("prefetch: %d %s", code, msg)
	}
	ca := testCAPEM(t)
	init := InitRequest{SandboxID: "sb1", Generation: 1, ActivationID: "a1", Node: "n1", Substrate: "ns", Hostname: "sb1", CACertPEM: ca}
	if code, msg := postBridge(t, hc, "/bridge/v1/init", init); code != http.StatusNoContent {
		t.Fatalf("init with a CA: %d %s", code, msg)
	}
	if r, p := g.counts(); r != 1 || p != 1 {
		t.Errorf("prefetch + init with a CA: %d reads, %d writes in the guest, want 1 and 1", r, p)
	}
	if got, want := g.file(TrustBundlePath), "ROOTS\n"+ca; got != want {
		t.Errorf("bundle = %q, want %q", got, want)
	}
	if code, _ := postBridge(t, hc, "/bridge/v1/trust/prefetch", nil); code != http.StatusConflict {
		t.Errorf("prefetch after an init with a CA: %d, want 409 (the identity is installed)", code)
	}
}

// TestInitWithABadCAInstallsNothing: a CA that is not one PEM CA
// certificate refuses the Init before the guest is asked anything, and no
// identity is installed.
func TestInitWithABadCAInstallsNothing(t *testing.T) {
	g := &fileGuest{files: map[string][]byte{}}
	hc := startFileBridge(t, g)
	init := InitRequest{SandboxID: "sb1", Generation: 1, ActivationID: "a1", Node: "n1", Substrate: "ns", Hostname: "sb1", CACertPEM: "not a certificate"}
	code, msg := postBridge(t, hc, "/bridge/v1/init", init)
	if code != http.StatusBadRequest || !strings.Contains(msg, "trust") {
		t.Fatalf("init with a bad CA: %d %s, want 400 naming the trust", code, msg)
	}
	if r, p := g.counts(); r != 0 || p != 0 {
		t.Errorf("a refused init reached the guest: %d reads, %d writes", r, p)
	}
	if code, _ := postBridge(t, hc, "/bridge/v1/trust/prefetch", nil); code != http.StatusNoContent {
		t.Errorf("prefetch after a refused init: %d, want 204 (no identity installed)", code)
	}
}

// TestInitWhoseTrustFailsInstallsNothing: when the guest cannot write the
// CA, the Init fails and no identity is installed (the node tears the
// execution down).
func TestInitWhoseTrustFailsInstallsNothing(t *testing.T) {
	g := &fileGuest{files: map[string][]byte{}, failWrites: true}
	hc := startFileBridge(t, g)
	init := InitRequest{SandboxID: "sb1", Generation: 1, ActivationID: "a1", Node: "n1", Substrate: "ns", Hostname: "sb1", CACertPEM: testCAPEM(t)}
	code, msg := postBridge(t, hc, "/bridge/v1/init", init)
	if code != http.StatusBadGateway || !strings.Contains(msg, "no space left") {
		t.Fatalf("init whose trust fails: %d %s, want 502 with the guest's error", code, msg)
	}
	if code, _ := postBridge(t, hc, "/bridge/v1/trust/prefetch", nil); code != http.StatusNoContent {
		t.Errorf("prefetch after the failed init: %d, want 204 (no identity installed)", code)
	}
}

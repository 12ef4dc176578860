package bridge

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/api/guest/v1/process/processv1connect"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/guestd"
)

func TestIsPublicGuestPath(t *testing.T) {
	tests := map[string]bool{
		"/process.Process/Start":             true,
		"/filesystem.Filesystem/ListDir":     true,
		"/files":                             true,
		"/health":                            true,
		"/envs":                              true,
		"/space.guest.v1.Control/Init":       false,
		"/space.guest.v1.Control/SetClock":   false,
		"/process.Process/":                  false,
		"/process.Process/Start/../../x":     false,
		"/bridge/v1/status":                  false,
		"/files/../space.guest.v1.Control/x": false,
		"/":                                  false,
	}
	for path, want := range tests {
		if got := IsPublicGuestPath(path); got != want {
			t.Errorf("IsPublicGuestPath(%q) = %v, want %v", path, got, want)
		}
	}
}

func FuzzIsPublicGuestPath(f *testing.F) {
	for _, s := range []string{"/files", "/process.Process/Start", "/space.guest.v1.Control/Init", "/process.Process/a/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if IsPublicGuestPath(p) && strings.Contains(p, "Control") && !strings.HasPrefix(p, "/process.Process/") && !strings.HasPrefix(p, "/filesystem.Filesystem/") {
			t.Fatalf("control-looking path %q is public", p)
		}
		if IsPublicGuestPath(p) && strings.Count(p, "/") > 2 {
			t.Fatalf("nested path %q is public", p)
		}
	})
}

// channelPair returns the two ends of a guest channel: a unix socketpair.
func channelPair(t testing.TB) (host, guest net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	hostFile, guestFile := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "guest")
	host, _ = net.FileConn(hostFile)
	guest, _ = net.FileConn(guestFile)
	hostFile.Close()
	guestFile.Close()
	return host, guest
}

// getEnvs asks the bridge for the guest's /envs with hc and returns the
// status and body.
func getEnvs(t testing.TB, hc *http.Client) (int, string) {
	t.Helper()
	resp, err := hc.Get("http://bridge/envs")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startBridge runs a real guest daemon and a bridge over a socketpair and
// returns an HTTP client of the bridge's socket; opts change the bridge's
// Config before it starts.
func startBridge(t testing.TB, opts ...func(*Config)) (*http.Client, <-chan struct{}, net.Conn) {
	t.Helper()
	hostConn, guestConn := channelPair(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	guestDone := make(chan error, 1)
	go func() { guestDone <- guestd.Serve(ctx, guestConn, guestd.Config{}, log) }()

	dir := t.TempDir()
	sock := filepath.Join(dir, "bridge.sock")
	cfg := Config{ExecID: "e1", Socket: sock, Channel: hostConn, ExitFile: filepath.Join(dir, "exit")}
	for _, o := range opts {
		o(&cfg)
	}
	b, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	bridgeDone := make(chan struct{})
	go func() {
		defer close(bridgeDone)
		if err := b.Run(ctx); err != nil {
			t.Errorf("bridge Run = %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-guestDone
		select {
		case <-bridgeDone:
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
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge not ready: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return hc, bridgeDone, guestConn
}

// capTransport puts a capability on every request.
type capTransport struct {
	token string
	next  http.RoundTripper
}

func (c capTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if c.token != "" {
		r.Header.Set(capability.Header, c.token)
	}
	return c.next.RoundTrip(r)
}

// admitted installs keys and an identity in the bridge (as the node does)
// and returns a client whose requests carry a capability for it.
func admitted(t testing.TB, hc *http.Client) (*http.Client, *capability.Signer, capability.Identity) {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	body, _ := json.Marshal(KeysRequest{Keys: capability.KeySetFor(1, signer)})
	resp, err := hc.Post("http://bridge/bridge/v1/keys", "application/json", bytes.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("push keys: %v %v", resp, err)
	}
	resp.Body.Close()
	pushClock(t, hc, ClockRequest{Agreed: true})
	id := capability.Identity{Sandbox: "sb1", Generation: 3, Node: "n1", Substrate: "ns", Activation: "a-1"}
	body, _ = json.Marshal(InitRequest{SandboxID: id.Sandbox, Generation: id.Generation, ActivationID: id.Activation, Node: id.Node, Substrate: id.Substrate, Hostname: "sb1", Env: map[string]string{"FROM_INIT": "yes"}})
	resp, err = hc.Post("http://bridge/bridge/v1/init", "application/json", bytes.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("init: %v %v", resp, err)
	}
	resp.Body.Close()
	return withCapability(t, hc, signer, id, capability.OpExec|capability.OpFiles), signer, id
}

// pushClock tells the bridge its node's clock verdict, as the node does.
func pushClock(t testing.TB, hc *http.Client, v ClockRequest) {
	t.Helper()
	body, _ := json.Marshal(v)
	resp, err := hc.Post("http://bridge/bridge/v1/clock", "application/json", bytes.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("push clock: %v %v", resp, err)
	}
	resp.Body.Close()
}

func withCapability(t testing.TB, hc *http.Client, signer *capability.Signer, id capability.Identity, ops capability.Op) *http.Client {
	t.Helper()
	tok, err := signer.Mint(id, ops, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: capTransport{token: capability.Encode(tok), next: hc.Transport}}
}

// TestBridgeAdmission: the bridge refuses public guest requests whose
// capability does not name its execution, before they reach the guest.
func TestBridgeAdmission(t *testing.T) {
	raw, _, _ := startBridge(t)
	// Before keys and identity, nothing is admitted.
	if resp, err := raw.Get("http://bridge/health"); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("before init: %v %v, want 403", resp, err)
	}
	ok, signer, id := admitted(t, raw)
	get := func(hc *http.Client) (int, string) { return getEnvs(t, hc) }
	if code, body := get(ok); code != http.StatusOK {
		t.Fatalf("this execution's capability: HTTP %d %s", code, body)
	}
	other := id
	other.Sandbox = "sb2"
	older := id
	older.Generation = 2
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	strangerSigner, _ := capability.NewSigner("k1", stranger)
	for name, tc := range map[string]struct {
		hc   *http.Client
		code int
	}{
		"no capability":    {raw, http.StatusForbidden},
		"another sandbox":  {withCapability(t, raw, signer, other, capability.OpExec), http.StatusForbidden},
		"older generation": {withCapability(t, raw, signer, older, capability.OpExec), http.StatusConflict},
		"unknown key":      {withCapability(t, raw, strangerSigner, id, capability.OpExec), http.StatusForbidden},
		"files only":       {withCapability(t, raw, signer, id, capability.OpFiles), http.StatusForbidden},
	} {
		if code, body := get(tc.hc); code != tc.code {
			t.Errorf("%s: HTTP %d %s, want %d", name, code, body, tc.code)
		}
	}
	// Retired: even this execution's capability gets RefreshRoute.
	resp, err := raw.Post("http://bridge/bridge/v1/retire", "application/json", nil)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("retire: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, body := get(ok); code != http.StatusConflict || !refusedWith(body, errdefs.ErrRefreshRoute) {
		t.Errorf("after retirement: HTTP %d %s, want 409 refresh_route", code, body)
	}
	// Every refusal was counted by reason, for the node to export.
	resp, err = raw.Get("http://bridge/bridge/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Refusals map[string]uint64 `json:"refusals"`
	}
	json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	want := map[string]uint64{RefusedNoKeys: 1, RefusedMissing: 1, RefusedDeny: 2, RefusedVerify: 1, RefusedRefreshRoute: 2}
	for k, v := range want {
		if m.Refusals[k] != v {
			t.Errorf("refusals[%s] = %d, want %d (all: %v)", k, m.Refusals[k], v, m.Refusals)
		}
	}
}

func TestBridgeForwardsPublicRoutesOnly(t *testing.T) {
	raw, _, _ := startBridge(t)
	ctx := context.Background()
	hc, _, _ := admitted(t, raw)

	proc := processv1connect.NewProcessClient(hc, "http://bridge")
	stream, err := proc.Start(ctx, connect.NewRequest(&processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "echo", Args: []string{"through the bridge"}}}))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
	}
	if err := stream.Err(); err != nil || out.String() != "through the bridge\n" {
		t.Fatalf("exec through bridge: %q, %v", out.String(), err)
	}

	// The control service is not reachable through the forwarding path.
	resp, err := hc.Post("http://bridge/space.guest.v1.Control/Init", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("control through bridge: HTTP %d, want 404", resp.StatusCode)
	}

	// The bridge's own init (done by admitted) reached the guest.
	resp, err = hc.Get("http://bridge/envs")
	if err != nil {
		t.Fatal(err)
	}
	var envs map[string]string
	json.NewDecoder(resp.Body).Decode(&envs)
	resp.Body.Close()
	if envs["FROM_INIT"] != "yes" {
		t.Errorf("envs after init = %v", envs)
	}
	resp, err = hc.Post("http://bridge/bridge/v1/init", "application/json", strings.NewReader("{bad"))
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("bad init body: HTTP %d, want 400", resp.StatusCode)
		}
	}
}

func TestBridgeStopsWhenGuestChannelEnds(t *testing.T) {
	_, done, guestConn := startBridge(t)
	guestConn.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("bridge still running after the guest channel closed")
	}
}

package bridge

import (
	"bytes"
	"context"
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

// startBridge runs a real guest daemon and a bridge over a socketpair and
// returns an HTTP client of the bridge's socket.
func startBridge(t *testing.T) (*http.Client, <-chan struct{}, net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	hostFile, guestFile := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "guest")
	hostConn, _ := net.FileConn(hostFile)
	guestConn, _ := net.FileConn(guestFile)
	hostFile.Close()
	guestFile.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	guestDone := make(chan error, 1)
	go func() { guestDone <- guestd.Serve(ctx, guestConn, guestd.Config{}, log) }()

	dir := t.TempDir()
	sock := filepath.Join(dir, "bridge.sock")
	b, err := New(Config{ExecID: "e1", Socket: sock, Channel: hostConn, ExitFile: filepath.Join(dir, "exit")}, log)
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

func TestBridgeForwardsPublicRoutesOnly(t *testing.T) {
	hc, _, _ := startBridge(t)
	ctx := context.Background()

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

	// The bridge's own init reaches it.
	body, _ := json.Marshal(InitRequest{SandboxID: "sb1", Generation: 1, ActivationID: "a-1", Hostname: "sb1", Env: map[string]string{"FROM_INIT": "yes"}})
	resp, err = hc.Post("http://bridge/bridge/v1/init", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("init: HTTP %d", resp.StatusCode)
	}
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

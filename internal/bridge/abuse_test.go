package bridge

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// hostileGuest gives a bridge a channel whose other end the test controls.
func hostileGuest(t *testing.T, readyTimeout time.Duration) (guestEnd net.Conn, run func() (Status, <-chan struct{}), exitFile string) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	hf, gf := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "guest")
	hostConn, _ := net.FileConn(hf)
	guestConn, _ := net.FileConn(gf)
	hf.Close()
	gf.Close()
	dir := t.TempDir()
	sock := filepath.Join(dir, "b.sock")
	exitFile = filepath.Join(dir, "exit")
	b, err := New(Config{ExecID: "e1", Socket: sock, Channel: hostConn, ExitFile: exitFile, ErrorsFile: filepath.Join(dir, ProtocolErrorsFile), ReadyTimeout: readyTimeout},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	t.Cleanup(func() { cancel(); guestConn.Close(); <-done })
	run = func() (Status, <-chan struct{}) {
		hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
		var st Status
		if resp, err := hc.Get("http://bridge/bridge/v1/status"); err == nil {
			json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		return st, done
	}
	return guestConn, run, exitFile
}

// TestGuestFloodingGarbage: a guest that answers the HTTP/2 preface with an
// endless stream of random bytes is cut off; the bridge stops with a reason
// and its memory stays bounded.
func TestGuestFloodingGarbage(t *testing.T) {
	guestConn, run, exitFile := hostileGuest(t, 30*time.Second)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	go func() {
		buf := make([]byte, 64<<10)
		for i := 0; i < 4096; i++ { // up to 256 MiB
			rand.Read(buf)
			if _, err := guestConn.Write(buf); err != nil {
				return
			}
		}
	}()
	_, done := run()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("bridge still serving a guest that sends garbage")
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 64<<20 {
		t.Errorf("heap grew by %d MiB while the guest flooded the channel", grown>>20)
	}
	reason, _ := os.ReadFile(exitFile)
	if len(strings.TrimSpace(string(reason))) == 0 {
		t.Error("no exit reason written")
	}
}

// TestSilentGuest: a guest that never answers is reported with a reason after
// the ready timeout instead of hanging the manager.
func TestSilentGuest(t *testing.T) {
	guestConn, run, _ := hostileGuest(t, 300*time.Millisecond)
	// Swallow whatever the bridge sends, answer nothing.
	go io.Copy(io.Discard, guestConn)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := run()
		if st.Reason != "" {
			if st.Ready || !strings.Contains(st.Reason, "did not answer") {
				t.Errorf("status = %+v", st)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reason reported for a silent guest: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

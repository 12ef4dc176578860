package node

import (
	"io"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/sys/unix"
)

// TestGuestProtocolErrorsCounted (catalogue A-1): a guest that breaks the
// protocol on its channel (a WINDOW_UPDATE of 0 on the connection) loses
// the channel, its real host bridge exits saying why, and the node counts
// the error by kind in space_node_guest_protocol_errors_total once it has
// reaped the bridge — and logs it with the execution, which is how an
// operator finds the sandbox from the metric.
func TestGuestProtocolErrorsCounted(t *testing.T) {
	testenvSkipWithoutProc(t)
	m, logs := bridgeTestManager(t)
	rec := nsRecord("sb1-g1-bad")
	host, guest := rawChannel(t)
	spawnTestBridge(t, m, rec, host)

	// The guest: the server's side of HTTP/2, then a protocol error.
	guest.SetDeadline(time.Now().Add(20 * time.Second))
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(guest, preface); err != nil {
		t.Fatalf("the bridge's preface: %v", err)
	}
	fr := http2.NewFramer(guest, guest)
	fr.AllowIllegalWrites = true
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteWindowUpdate(0, 0); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, guest)

	var text string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		rr := httptest.NewRecorder()
		m.handleMetrics(rr, httptest.NewRequest("GET", "/node/v1/metrics", nil))
		if text = rr.Body.String(); strings.Contains(text, "space_node_guest_protocol_errors_total{") {
			break
		}
	}
	if !strings.Contains(text, "space_node_guest_protocol_errors_total{") {
		t.Fatalf("no guest protocol error counted after the guest broke the protocol:\n%s\nbridge log:%s", text, m.bridgeLogTail(rec.ExecID))
	}
	exit, _ := os.ReadFile(m.records.exitFile(rec.ExecID))
	if !strings.Contains(string(exit), "guest protocol error") {
		t.Errorf("the bridge's exit reason %q does not name the protocol error", exit)
	}
	if !strings.Contains(logs.String(), "sb1-g1-bad") || !strings.Contains(logs.String(), "guest protocol") {
		t.Errorf("the node's log does not name the execution whose guest broke the protocol:\n%s", logs.String())
	}
}

// rawChannel is an ns guest channel whose guest end the test drives.
func rawChannel(t *testing.T) (*os.File, net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	gf := os.NewFile(uintptr(fds[1]), "guest")
	guestConn, err := net.FileConn(gf)
	gf.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { guestConn.Close() })
	return os.NewFile(uintptr(fds[0]), "host"), guestConn
}

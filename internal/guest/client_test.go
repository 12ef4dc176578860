package guest_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/sys/unix"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/guest"
)

func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatalf("FileConn: %v", err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}

// TestSilentGuestHonoursDeadline: a guest that reads everything and never
// answers must not hang a caller with a deadline.
func TestSilentGuestHonoursDeadline(t *testing.T) {
	peer, conn := socketPair(t)
	defer peer.Close()
	go io.Copy(io.Discard, peer)
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Control().Ready(ctx, connect.NewRequest(&controlv1.ReadyRequest{}))
	if code := connect.CodeOf(err); code != connect.CodeDeadlineExceeded {
		t.Fatalf("Ready against a silent guest: %v (code %v), want deadline exceeded", err, code)
	}
	if err := c.Wait(ctx); err == nil {
		t.Fatalf("Wait against a silent guest with an expired ctx succeeded")
	}
}

// TestDoneWhenPeerCloses: Done closes when the guest end of the stream goes away.
func TestDoneWhenPeerCloses(t *testing.T) {
	peer, conn := socketPair(t)
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer c.Close()
	select {
	case <-c.Done():
		t.Fatal("Done closed while the stream is up")
	default:
	}
	peer.Close()
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done not closed 30s after the peer closed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Control().Ready(ctx, connect.NewRequest(&controlv1.ReadyRequest{})); err == nil {
		t.Fatal("Ready succeeded on a dead stream")
	}
}

// TestOversizedAnswerRefused: a hostile guest answering with a message over
// MaxMessageBytes gets an error, not host memory.
func TestOversizedAnswerRefused(t *testing.T) {
	server, conn := socketPair(t)
	srv := &http2.Server{}
	go srv.ServeConn(server, &http2.ServeConnOpts{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/proto")
		w.WriteHeader(http.StatusOK)
		// A ReadyResponse whose version field claims and carries 32 MiB.
		hdr := []byte{0x0a}
		hdr = binary.AppendUvarint(hdr, 32<<20)
		w.Write(hdr)
		chunk := make([]byte, 1<<20)
		for i := 0; i < 32; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})})
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer c.Close()
	defer server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = c.Control().Ready(ctx, connect.NewRequest(&controlv1.ReadyRequest{}))
	if code := connect.CodeOf(err); code != connect.CodeResourceExhausted {
		t.Fatalf("Ready with a 32 MiB answer: %v (code %v), want resource exhausted", err, code)
	}
}

// TestOversizedControlAnswerRefused: the control service's answers are
// small, and one of 1 MiB — under MaxMessageBytes — is refused at
// MaxControlAnswerBytes: a guest answering the bridge's Ready polls with
// megabytes makes it buffer no more than that.
func TestOversizedControlAnswerRefused(t *testing.T) {
	server, conn := socketPair(t)
	srv := &http2.Server{}
	go srv.ServeConn(server, &http2.ServeConnOpts{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/proto")
		w.WriteHeader(http.StatusOK)
		// A ReadyResponse whose version is 1 MiB long.
		msg := binary.AppendUvarint([]byte{0x0a}, 1<<20)
		w.Write(append(msg, make([]byte, 1<<20)...))
	})})
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer c.Close()
	defer server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = c.Control().Ready(ctx, connect.NewRequest(&controlv1.ReadyRequest{}))
	if code := connect.CodeOf(err); code != connect.CodeResourceExhausted {
		t.Fatalf("Ready with a 1 MiB answer: %v (code %v), want resource exhausted", err, code)
	}
}

// TestLyingEnvelopeLength (catalogue A-2): a guest streaming a process's
// events declares a 4 GiB message and sends 64 MiB of it, then ends the
// stream: the client refuses it at MaxMessageBytes and discards what comes,
// holding no more than a small part of it — never the declared size nor
// what was sent.
func TestLyingEnvelopeLength(t *testing.T) {
	server, conn := socketPair(t)
	srv := &http2.Server{}
	go srv.ServeConn(server, &http2.ServeConnOpts{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/connect+proto")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte{0, 0xff, 0xff, 0xff, 0xff})
		chunk := make([]byte, 1<<20)
		for i := 0; i < 64; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})})
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer c.Close()
	defer server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	stream, err := c.Process().Start(ctx, connect.NewRequest(&processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "true"}}))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	for stream.Receive() {
		t.Fatal("a message of a 4 GiB declaration was received")
	}
	runtime.ReadMemStats(&after)
	if code := connect.CodeOf(stream.Err()); code != connect.CodeResourceExhausted {
		t.Errorf("a 4 GiB declaration: %v (code %v), want resource exhausted", stream.Err(), code)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("%d MiB allocated reading a 4 GiB declaration with 64 MiB behind it", alloc>>20)
	}
}

// TestClientsDoNotOfferGzip: the bridge's clients of the guest protocol
// offer no compression, so the guest answers every message as it is (a
// gzip writer's reset alone cost half the guest's CPU in a warm-pool
// claim, for answers of a few bytes crossing a local socket).
func TestClientsDoNotOfferGzip(t *testing.T) {
	server, conn := socketPair(t)
	got := make(chan http.Header, 8)
	srv := &http2.Server{}
	go srv.ServeConn(server, &http2.ServeConnOpts{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/proto")
		w.WriteHeader(http.StatusOK)
	})})
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer c.Close()
	defer server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls := map[string]func(){
		"Control.Init":    func() { c.Control().Init(ctx, connect.NewRequest(&controlv1.InitRequest{})) },
		"Control.Ready":   func() { c.Control().Ready(ctx, connect.NewRequest(&controlv1.ReadyRequest{})) },
		"Process.List":    func() { c.Process().List(ctx, connect.NewRequest(&processv1.ListRequest{})) },
		"Filesystem.Stat": func() { c.Filesystem().Stat(ctx, connect.NewRequest(&filesystemv1.StatRequest{})) },
	}
	for name, call := range calls {
		call()
		h := <-got
		for _, k := range []string{"Accept-Encoding", "Connect-Accept-Encoding"} {
			if v := h.Get(k); strings.Contains(v, "gzip") {
				t.Errorf("%s offers %s: %q", name, k, v)
			}
		}
	}
}

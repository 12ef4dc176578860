package bridge

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/api/guest/v1/process/processv1connect"
)

// The node → bridge → guest part of a request, with real processes on both
// sides of the channel: the node's side is an HTTP client on the bridge's
// unix socket (as bridgeConn), the guest a real daemon on a socketpair.

// BenchmarkBridgeExecTrue: a run-to-completion exec of /bin/true through the
// bridge (admission, proxy, guest channel, spawn), streamed to its end.
func BenchmarkBridgeExecTrue(b *testing.B) {
	raw, _, _ := startBridge(b)
	hc, _, _ := admitted(b, raw)
	pc := processv1connect.NewProcessClient(hc, "http://bridge")
	no := false
	req := &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "/bin/true"}, Stdin: &no}
	for b.Loop() {
		stream, err := pc.Start(context.Background(), connect.NewRequest(req))
		if err != nil {
			b.Fatal(err)
		}
		ended := false
		for stream.Receive() {
			ended = ended || stream.Msg().GetEvent().GetEnd() != nil
		}
		if err := stream.Err(); err != nil || !ended {
			b.Fatalf("stream: ended %v, err %v", ended, err)
		}
		stream.Close()
	}
}

// BenchmarkBridgeHealth: the smallest admitted request through the bridge.
func BenchmarkBridgeHealth(b *testing.B) {
	raw, _, _ := startBridge(b)
	hc, _, _ := admitted(b, raw)
	for b.Loop() {
		resp, err := hc.Get("http://bridge/health")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			b.Fatalf("health: HTTP %d", resp.StatusCode)
		}
	}
}

const benchFileSize = 16 << 20

// BenchmarkBridgeFilesWrite: POST /files of 16 MiB through the bridge.
func BenchmarkBridgeFilesWrite(b *testing.B) {
	raw, _, _ := startBridge(b)
	hc, _, _ := admitted(b, raw)
	target := filesURL(b)
	data := bytes.Repeat([]byte("0123456789abcdef"), benchFileSize/16)
	b.SetBytes(benchFileSize)
	for b.Loop() {
		resp, err := hc.Post(target, "application/octet-stream", bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("write: HTTP %d", resp.StatusCode)
		}
	}
}

// BenchmarkBridgeFilesRead: GET /files of 16 MiB through the bridge.
func BenchmarkBridgeFilesRead(b *testing.B) {
	raw, _, _ := startBridge(b)
	hc, _, _ := admitted(b, raw)
	target := filesURL(b)
	data := bytes.Repeat([]byte("0123456789abcdef"), benchFileSize/16)
	resp, err := hc.Post(target, "application/octet-stream", bytes.NewReader(data))
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("write: %v %v", resp, err)
	}
	resp.Body.Close()
	b.SetBytes(benchFileSize)
	for b.Loop() {
		resp, err := hc.Get(target)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || n != benchFileSize {
			b.Fatalf("read: HTTP %d, %d bytes", resp.StatusCode, n)
		}
	}
}

func filesURL(b *testing.B) string {
	return "http://bridge/files?" + url.Values{"path": {filepath.Join(b.TempDir(), "data")}}.Encode()
}

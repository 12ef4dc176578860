package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/e2bapi"
	"github.com/spacesandbox/space/internal/sandbox"
)

// TestUploadLengthAbuse sends file uploads whose length lies or never ends
// to the REST API and to the E2B data plane's envd /files: each is
// answered, bounded, and one announcing too much never reaches the sandbox.
func TestUploadLengthAbuse(t *testing.T) {
	const limit = 64 << 10
	p := newE2BPlaneWith(t, func(c *Config) {
		c.MaxFileBytes = limit
		c.UploadIdleTimeout = 300 * time.Millisecond
	})
	sb := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	addr := strings.TrimPrefix(p.url, "http://")
	surfaces := []struct {
		name string
		head string // the request line and headers but the length's
		ok   int    // the status of a complete upload
	}{
		{"REST", "PUT /v1/sandboxes/" + sb.ID + "/files?path=/tmp/f HTTP/1.1\r\nHost: space\r\nAuthorization: Bearer " + p.key + "\r\nContent-Type: application/octet-stream\r\n", http.StatusNoContent},
		{"E2BEnvd", "POST /files?path=/tmp/f HTTP/1.1\r\nHost: space\r\n" + e2bapi.SandboxHeader + ": " + sb.ID + "\r\n" + e2bapi.PortHeader + ": 49983\r\n" + e2bapi.TokenHeader + ": " + p.srv.e2bAPI.AccessToken(sb.ID) + "\r\nContent-Type: application/octet-stream\r\n", http.StatusOK},
	}
	// send writes the request and body (the body from its own goroutine,
	// as long as the server reads) and reads the answers that come back
	// within 30 s.
	send := func(t *testing.T, req string, body io.Reader, answers int) []*http.Response {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		if body != nil {
			go io.Copy(c, body) // ends when the connection does
		}
		br := bufio.NewReader(c)
		var out []*http.Response
		for range answers {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer (%v): the server is still waiting on the body", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body = io.NopCloser(strings.NewReader(string(b)))
			out = append(out, resp)
		}
		return out
	}
	text := func(r *http.Response) string { b, _ := io.ReadAll(r.Body); return strings.TrimSpace(string(b)) }
	seen := func() int { p.node.mu.Lock(); defer p.node.mu.Unlock(); return len(p.node.seen) }

	for _, sf := range surfaces {
		t.Run(sf.name, func(t *testing.T) {
			t.Run("ContentLengthOverLimit", func(t *testing.T) {
				before := seen()
				// 1 TiB announced, nothing sent: refused on the headers alone.
				r := send(t, sf.head+"Content-Length: 1099511627776\r\n\r\n", nil, 1)[0]
				if r.StatusCode != http.StatusRequestEntityTooLarge {
					t.Errorf("Content-Length 1 TiB: HTTP %d %s, want 413", r.StatusCode, text(r))
				}
				if n := seen() - before; n != 0 {
					t.Errorf("an upload refused by its Content-Length reached the sandbox's guest (%d requests)", n)
				}
			})
			t.Run("EndlessChunkedBody", func(t *testing.T) {
				chunk := strings.Repeat("x", 4096)
				endless := readerFunc(func(b []byte) (int, error) {
					return copy(b, fmt.Sprintf("%x\r\n%s\r\n", len(chunk), chunk)), nil
				})
				r := send(t, sf.head+"Transfer-Encoding: chunked\r\n\r\n", endless, 1)[0]
				if r.StatusCode != http.StatusRequestEntityTooLarge {
					t.Errorf("endless body: HTTP %d %s, want 413", r.StatusCode, text(r))
				}
			})
			t.Run("ContentLengthLargerThanBody", func(t *testing.T) {
				// 1,000 bytes announced, 10 sent, then silence.
				r := send(t, sf.head+"Content-Length: 1000\r\n\r\n0123456789", nil, 1)[0]
				if body := text(r); r.StatusCode != http.StatusBadRequest || !strings.Contains(body, "sent nothing") {
					t.Errorf("stalled body: HTTP %d %s, want 400 saying the body stalled", r.StatusCode, body)
				}
			})
			t.Run("ContentLengthSmallerThanBody", func(t *testing.T) {
				// 5 bytes announced, more sent: the file gets 5, the rest
				// is read as the next request, and refused as such.
				rs := send(t, sf.head+"Content-Length: 5\r\n\r\nhello, and more that is no request\r\n\r\n", nil, 2)
				if rs[0].StatusCode != sf.ok {
					t.Errorf("first answer: HTTP %d %s, want %d (5 bytes written)", rs[0].StatusCode, text(rs[0]), sf.ok)
				}
				if rs[1].StatusCode != http.StatusBadRequest {
					t.Errorf("the bytes past the Content-Length: HTTP %d, want 400 (not a request)", rs[1].StatusCode)
				}
			})
		})
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

// TestUploadReadsTheGuestAnswerToItsEnd: a REST upload answered 204 has
// read the guest's answer (the files it wrote) to its end, also when that
// answer comes in pieces, as a vm guest's does: closed unread, the stream
// was cut behind the server, and the node's and the host bridge's
// proxies aborted it mid-answer (the bridge never saw its forward end).
func TestUploadReadsTheGuestAnswerToItsEnd(t *testing.T) {
	p := newE2BPlane(t)
	sb := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	cut := make(chan bool, 1)
	p.node.mu.Lock()
	p.node.guest = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			t.Errorf("guest: read the upload: %v", err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		// The rest of the answer a moment later.
		select {
		case <-r.Context().Done():
			cut <- true
			return
		case <-time.After(300 * time.Millisecond):
		}
		_, _ = io.WriteString(w, `[{"path":"/tmp/f","name":"f","type":"file"}]`+"\n")
		cut <- false
	})
	p.node.mu.Unlock()
	req, _ := http.NewRequest(http.MethodPut, p.url+"/v1/sandboxes/"+sb.ID+"/files?path=/tmp/f", strings.NewReader("late\n"))
	req.Header.Set("Authorization", "Bearer "+p.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("upload: HTTP %d, want 204", resp.StatusCode)
	}
	select {
	case c := <-cut:
		if c {
			t.Fatal("the upload was answered 204 and the guest's answer cut before its end: the server closed it unread")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the guest's handler never ended")
	}
}

// TestUploadAnswerThatNeverEnds: a guest that answers an upload 200 and
// never ends its answer does not hold the upload open: the server gives
// the answer up after a bound and answers 204 (the 200 said the file is in
// place).
func TestUploadAnswerThatNeverEnds(t *testing.T) {
	p := newE2BPlane(t)
	sb := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	release := make(chan struct{})
	defer close(release)
	p.node.mu.Lock()
	p.node.guest = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `[{"path":"/tmp/f",`)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	p.node.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, p.url+"/v1/sandboxes/"+sb.ID+"/files?path=/tmp/f", strings.NewReader("late\n"))
	req.Header.Set("Authorization", "Bearer "+p.key)
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("upload whose guest answer never ends: %v after %s (a hang)", err, time.Since(t0).Round(time.Millisecond))
	}
	resp.Body.Close()
	t.Logf("answered %d after %s", resp.StatusCode, time.Since(t0).Round(time.Millisecond))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("upload: HTTP %d, want 204", resp.StatusCode)
	}
}

package s3store_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
	"github.com/spacesandbox/space/internal/objstore/objstoretest"
	"github.com/spacesandbox/space/internal/objstore/s3store/s3test"
)

// liar is an S3-compatible server in front of a real one that lies on
// demand: wrong bytes in object bodies, listings with entries left out,
// ETags of another object, bodies cut short of their Content-Length.
type liar struct {
	mu   sync.Mutex
	lie  string // "", "bytes", "listing", "etag", "short"
	addr string
	// throttle: the next this many requests are answered 503 SlowDown
	// with Retry-After, as a throttling S3 does (-1: every one);
	// throttled counts those answers.
	throttle, throttled int
}

func (l *liar) set(lie string) { l.mu.Lock(); l.lie = lie; l.mu.Unlock() }

// slowDown makes the next n requests (every one: -1) answer 503 SlowDown.
func (l *liar) slowDown(n int) { l.mu.Lock(); l.throttle, l.throttled = n, 0; l.mu.Unlock() }

// throttledSoFar is how many requests were answered 503 since slowDown.
func (l *liar) throttledSoFar() int { l.mu.Lock(); defer l.mu.Unlock(); return l.throttled }

// throttleNext reports whether this request is answered 503.
func (l *liar) throttleNext() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.throttle == 0 {
		return false
	}
	if l.throttle > 0 {
		l.throttle--
	}
	l.throttled++
	return true
}

var listEntry = regexp.MustCompile(`(?s)<Contents>.*?</Contents>`)

func startLiar(t *testing.T, srv *s3test.Server) *liar {
	l := &liar{}
	target, err := url.Parse("http://" + srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := httputil.NewSingleHostReverseProxy(target)
	p.ModifyResponse = func(resp *http.Response) error {
		l.mu.Lock()
		lie := l.lie
		l.mu.Unlock()
		req := resp.Request
		isList := req.Method == http.MethodGet && req.URL.Query().Has("list-type")
		isObject := (req.Method == http.MethodGet || req.Method == http.MethodHead) && !isList && len(req.URL.Query()) == 0 ||
			req.Method == http.MethodGet && req.Header.Get("Range") != ""
		if resp.StatusCode >= 300 {
			return nil
		}
		switch {
		case lie == "etag" && isObject:
			resp.Header.Set("ETag", `"00000000000000000000000000000000-2"`)
		case lie == "bytes" && isObject && req.Method == http.MethodGet:
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if len(b) > 0 {
				b[len(b)/2] ^= 0xff
			}
			resp.Body = io.NopCloser(bytes.NewReader(b))
		case lie == "short" && isObject && req.Method == http.MethodGet:
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(b[:len(b)/2])) // Content-Length stays
		case lie == "listing" && isList:
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			resp.Body.Close()
			n := 0
			b = listEntry.ReplaceAllFunc(b, func(e []byte) []byte {
				if n++; n%2 == 0 {
					return nil // every other entry left out
				}
				return e
			})
			resp.Body = io.NopCloser(bytes.NewReader(b))
			resp.ContentLength = int64(len(b))
			resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		}
		return nil
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.throttleNext() {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
			return
		}
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	l.addr = strings.TrimPrefix(hs.URL, "http://")
	return l
}

// TestLyingServer: against an S3-compatible server that returns wrong
// bytes, bodies short of their length, ETags of another object and
// listings with entries left out, reading an object with the size and
// digest its writer recorded (what a restore does) refuses — never a
// success with other bytes — and nothing that was acknowledged is lost:
// once the server tells the truth again every object reads back whole.
func TestLyingServer(t *testing.T) {
	srv := s3test.Start(t)
	l := startLiar(t, srv)
	cfg := config(srv, "lies")
	cfg.Endpoint = l.addr
	s := open(t, cfg)
	ctx := t.Context()
	objs := map[string]objstore.Info{}
	for key, size := range map[string]int64{"small": 1000, "b": 2000, "c": 3000, "multipart": 12 << 20} {
		info, err := s.Put(ctx, key, objstoretest.Generator(uint64(size), size), size)
		if err != nil {
			t.Fatalf("Put %s: %v", key, err)
		}
		objs[key] = info
	}
	for _, lie := range []string{"bytes", "short"} {
		l.set(lie)
		for key, want := range objs {
			err := objstore.Verify(ctx, s, key, want)
			if err == nil {
				t.Errorf("lie %q: Verify %s succeeded", lie, key)
			} else if !errors.Is(err, errdefs.ErrFailedPrecondition) && !errors.Is(err, errdefs.ErrUnavailable) {
				t.Errorf("lie %q: Verify %s: %v, want FailedPrecondition or Unavailable", lie, key, err)
			}
		}
	}
	// An ETag of another object: the multipart object's digest record is
	// bound to its real ETag, so no digest is claimed for it (the bytes are
	// still judged by the recorded digest, and they are right).
	l.set("etag")
	if st, err := s.Stat(ctx, "multipart"); err == nil && st.Digest != "" {
		t.Errorf("lie \"etag\": Stat multipart claims digest %s for an object with another ETag", st.Digest)
	}
	l.set("listing")
	listed, err := s.List(ctx, "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(listed) >= len(objs) {
		t.Fatalf("the lying listing has %d entries of %d: the liar did not lie", len(listed), len(objs))
	}
	// A listing that leaves objects out does not make them unreadable by
	// their keys (restores and deletes go by the recorded keys).
	for key, want := range objs {
		if err := objstore.Verify(ctx, s, key, want); err != nil {
			t.Errorf("under a truncated listing: Verify %s: %v", key, err)
		}
	}
	l.set("")
	for key, want := range objs {
		if err := objstore.Verify(ctx, s, key, want); err != nil {
			t.Errorf("after the lies: Verify %s: %v (an acknowledged object was lost)", key, err)
		}
	}
}

// TestThrottlingServer (F-5): an S3 server that answers 503 SlowDown with
// Retry-After, as S3 does under load. A few such answers are retried
// within the call (the object is written and reads back whole); a server
// that keeps throttling makes the call fail as Unavailable — the class a
// hibernation retries and then refuses on, leaving the sandbox paused —
// within its operation timeout, after a bounded number of attempts, never
// a hang and never a success.
func TestThrottlingServer(t *testing.T) {
	srv := s3test.Start(t)
	l := startLiar(t, srv)
	cfg := config(srv, "throttled")
	cfg.Endpoint = l.addr
	cfg.OpTimeout = 20 * time.Second
	s := open(t, cfg)
	ctx := t.Context()

	l.slowDown(2)
	const size = 5000
	info, err := s.Put(ctx, "through", objstoretest.Generator(7, size), size)
	if err != nil {
		t.Fatalf("Put through two 503 SlowDown answers: %v", err)
	}
	if n := l.throttledSoFar(); n != 2 {
		t.Fatalf("the server answered 503 %d times, want 2: the test did not throttle", n)
	}
	l.slowDown(2)
	if err := objstore.Verify(ctx, s, "through", info); err != nil {
		t.Errorf("Verify through two 503 SlowDown answers: %v", err)
	}

	l.slowDown(-1)
	start := time.Now()
	_, err = s.Put(ctx, "never", objstoretest.Generator(8, size), size)
	took := time.Since(start)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Put against a server that always throttles = %v, want Unavailable", err)
	} else if !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "SlowDown") {
		t.Errorf("Put against a throttling server: %v, want the 503 SlowDown named", err)
	}
	if took > cfg.OpTimeout+5*time.Second {
		t.Errorf("Put against a throttling server took %v, over its operation timeout %v", took, cfg.OpTimeout)
	}
	if n := l.throttledSoFar(); n > cfg.MaxRetries+1 && cfg.MaxRetries > 0 || n == 0 {
		t.Errorf("the store made %d attempts against the throttling server, want 1…%d (Config.MaxRetries)", n, cfg.MaxRetries+1)
	}
	t.Logf("always throttled: %d attempts in %v: %v", l.throttledSoFar(), took.Round(time.Millisecond), err)
	l.slowDown(0)
	if _, err := s.Stat(ctx, "never"); !errdefs.IsNotFound(err) {
		t.Errorf("Stat of the object whose every Put was throttled = %v, want NotFound", err)
	}
	if err := objstore.Verify(ctx, s, "through", info); err != nil {
		t.Errorf("after the throttling: Verify: %v (an acknowledged object was lost)", err)
	}
}

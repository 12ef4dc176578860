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
}

func (l *liar) set(lie string) { l.mu.Lock(); l.lie = lie; l.mu.Unlock() }

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
	hs := httptest.NewServer(p)
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

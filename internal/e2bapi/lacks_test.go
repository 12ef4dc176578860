package e2bapi

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// muxHost is a Host that lets every request through, for routing tests.
type muxHost struct{ statusHost }

func (muxHost) Authenticate(next http.HandlerFunc) http.HandlerFunc { return next }
func (muxHost) Instrument(_ string, h http.Handler) http.Handler    { return h }

// TestE2BSDKRoutes: every route the published e2b SDKs call
// (testdata/sdk-routes.txt) is served by a handler of its own or refused
// with a 400 naming the feature; none falls to the catch-all 404, which
// the SDKs read as "not found" (Template.exists answers false). A path
// E2B's API lacks still answers 404.
func TestE2BSDKRoutes(t *testing.T) {
	a := &API{host: muxHost{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	mux := http.NewServeMux()
	a.Register(mux)
	lacking := map[string]e2bFeature{}
	for _, l := range e2bLacking {
		lacking[e2bLackingPattern(l.pattern)] = l.feature
	}
	f, err := os.Open("testdata/sdk-routes.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n++
		method, path, _ := strings.Cut(line, " ")
		req := httptest.NewRequest(method, PathPrefix+strings.ReplaceAll(path, "{x}", "x1"), nil)
		_, pattern := mux.Handler(req)
		if pattern == PathPrefix+"/" || pattern == "" {
			t.Errorf("%s: falls to the catch-all 404; serve it or refuse it by name (e2bLacking)", line)
			continue
		}
		feature, ok := lacking[pattern]
		if !ok {
			continue // served by a handler of its own
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		var e e2bError
		if json.Unmarshal(rec.Body.Bytes(), &e) != nil || rec.Code != http.StatusBadRequest || e.Code != 400 ||
			!strings.Contains(e.Message, feature.name) || !strings.Contains(e.Message, "not supported by SPACE") {
			t.Errorf("%s: HTTP %d %s; want 400 naming %q", line, rec.Code, rec.Body, feature.name)
		}
	}
	if n < 50 {
		t.Fatalf("testdata/sdk-routes.txt lists %d routes; want the SDKs' 60", n)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", PathPrefix+"/no/such/route", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /no/such/route: HTTP %d, want 404", rec.Code)
	}
}

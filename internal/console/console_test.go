package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

var builtFS = fstest.MapFS{
	"dist/index.html": {Data: []byte(`<!doctype html><script src="app.js"></script>`)},
	"dist/app.js":     {Data: []byte(`console.log(1)`)},
	"dist/app.css":    {Data: []byte(`body{}`)},
}

func get(t *testing.T, h http.Handler, method, target, host string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	if host != "" {
		r.Host = host
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func checkHeaders(t *testing.T, w *httptest.ResponseRecorder, host string) {
	t.Helper()
	csp := w.Header().Get("Content-Security-Policy")
	for _, want := range []string{
		"default-src 'self'", "script-src 'self'", "style-src 'self'",
		"connect-src 'self' ws://" + host + " wss://" + host,
		"frame-ancestors 'none'", "object-src 'none'", "base-uri 'none'",
	} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	// No inline script or style, no other origin, no eval.
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "http:", "https:", "*"} {
		if strings.Contains(csp, bad) {
			t.Errorf("Content-Security-Policy %q allows %q", csp, bad)
		}
	}
	for k, want := range map[string]string{
		"X-Frame-Options":        "DENY",
		"X-Content-Type-Options": "nosniff",
		"Referrer-Policy":        "no-referrer",
	} {
		if got := w.Header().Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

func TestServesBuiltAssetsWithHeaders(t *testing.T) {
	h := newHandler(builtFS)
	for _, tc := range []struct{ target, wantBody, wantType string }{
		{"/console/", `src="app.js"`, "text/html"},
		{"/console/app.js", "console.log(1)", "javascript"},
		{"/console/app.css", "body{}", "text/css"},
		// A deep link the app routes itself gets the app's page.
		{"/console/sandboxes/sb-1", `src="app.js"`, "text/html"},
		{"/console/../../etc/passwd", `src="app.js"`, "text/html"},
	} {
		w := get(t, h, "GET", tc.target, "console.test:8080")
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: status %d, want 200", tc.target, w.Code)
		}
		if !strings.Contains(w.Body.String(), tc.wantBody) {
			t.Errorf("GET %s: body %q lacks %q", tc.target, w.Body.String(), tc.wantBody)
		}
		if ct := w.Header().Get("Content-Type"); !strings.Contains(ct, tc.wantType) {
			t.Errorf("GET %s: Content-Type %q, want %s", tc.target, ct, tc.wantType)
		}
		checkHeaders(t, w, "console.test:8080")
	}
	if w := get(t, h, "GET", "/console", ""); w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/console/" {
		t.Errorf("GET /console: %d to %q, want a redirect to /console/", w.Code, w.Header().Get("Location"))
	}
	if w := get(t, h, "POST", "/console/", ""); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /console/: status %d, want 405", w.Code)
	}
}

func TestNotBuiltIs503(t *testing.T) {
	h := newHandler(fstest.MapFS{"dist/.gitkeep": {}})
	w := get(t, h, "GET", "/console/", "console.test")
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", w.Code)
	}
	if !strings.Contains(w.Body.String(), "console not built: run make build") {
		t.Errorf("body %q does not say to run make build", w.Body.String())
	}
	if strings.Contains(w.Body.String(), "<script") {
		t.Error("the not-built page carries a script")
	}
	checkHeaders(t, w, "console.test")
}

func TestHostInjectionLeavesWebSocketsOut(t *testing.T) {
	for _, host := range []string{"evil.test; script-src *", "a b", "x'y"} {
		p := policy(host)
		if strings.Contains(p, "ws://") || strings.Contains(p, "*") || strings.Count(p, ";") != 9 {
			t.Errorf("policy(%q) = %q: the host went into it", host, p)
		}
	}
	if p := policy("[::1]:8080"); !strings.Contains(p, "ws://[::1]:8080") {
		t.Errorf("policy([::1]:8080) = %q lacks its WebSocket source", p)
	}
}

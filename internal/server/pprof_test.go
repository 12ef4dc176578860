package server

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/service"
)

// TestPprofAdminOnly: Go's profiles are served to admin keys only.
func TestPprofAdminOnly(t *testing.T) {
	cp := newControlPlane(t, Config{})
	_, admin, err := service.MintKey(t.Context(), cp.st, cp.tenant, true)
	if err != nil {
		t.Fatal(err)
	}
	get := func(key, path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, cp.url+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline"} {
		if code, _ := get("", path); code != http.StatusUnauthorized {
			t.Errorf("%s without a key: HTTP %d, want 401", path, code)
		}
		if code, _ := get(cp.key, path); code != http.StatusForbidden {
			t.Errorf("%s with a tenant key: HTTP %d, want 403", path, code)
		}
	}
	if code, body := get(admin, "/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("goroutine profile for the admin: HTTP %d %.100q", code, body)
	}
	if code, body := get(admin, "/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "heap") {
		t.Errorf("pprof index for the admin: HTTP %d %.100q", code, body)
	}
}

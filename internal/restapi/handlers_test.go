package restapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

func TestStatusOf(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{fmt.Errorf("x: %w", errdefs.ErrInvalidArgument), 400},
		{fmt.Errorf("x: %w", errdefs.ErrUnauthenticated), 401},
		{fmt.Errorf("x: %w", errdefs.ErrPermissionDenied), 403},
		{fmt.Errorf("x: %w", errdefs.ErrNotFound), 404},
		{&sandbox.IllegalTransitionError{State: sandbox.StateDeleting, Op: sandbox.OpPause}, 409},
		{fmt.Errorf("x: %w", errTooLarge), 413},
		{fmt.Errorf("x: %w", errdefs.ErrResourceExhausted), 503},
		{fmt.Errorf("plain"), 500},
	}
	for _, tt := range tests {
		if got, code := statusOf(tt.err); got != tt.want || code == "" {
			t.Errorf("statusOf(%v) = %d %q, want %d", tt.err, got, code, tt.want)
		}
	}
}

func TestDecodeJSON(t *testing.T) {
	tests := []struct {
		body string
		ct   string
		ok   bool
	}{
		{`{"name":"a"}`, "application/json", true},
		{`{"name":"a"}`, "", true},
		{`{"name":"a"} {"x":1}`, "application/json", false},
		{`{"name":"a","extra":1}`, "application/json", false},
		{`{`, "application/json", false},
		{`{"name":"a"}`, "application/x-www-form-urlencoded", true},
		{`{"name":"` + strings.Repeat("a", maxJSONBody) + `"}`, "application/json", false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tt.body))
		if tt.ct != "" {
			r.Header.Set("Content-Type", tt.ct)
		}
		var v struct{ Name string }
		err := decodeJSON(httptest.NewRecorder(), r, &v)
		if (err == nil) != tt.ok {
			t.Errorf("decodeJSON(%.40q, %q) = %v, want ok=%v", tt.body, tt.ct, err, tt.ok)
		}
		if err != nil {
			if st, _ := statusOf(err); st != 400 && st != 413 {
				t.Errorf("decodeJSON error maps to %d", st)
			}
		}
	}
}

func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(`{"template":"minimal","env":{"A":"b"}}`))
	f.Add([]byte(`{"cmd":["a"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(string(b)))
		var v struct {
			Template string            `json:"template"`
			Env      map[string]string `json:"env"`
			Cmd      []string          `json:"cmd"`
		}
		if err := decodeJSON(httptest.NewRecorder(), r, &v); err != nil {
			if st, _ := statusOf(err); st >= 500 {
				t.Fatalf("bad input mapped to %d: %v", st, err)
			}
		}
	})
}

func TestNormaliseSource(t *testing.T) {
	s := &API{cfg: Config{Builtins: map[string]string{"minimal": "builtin:minimal"}}}
	good := map[string]string{
		"minimal":                      "builtin:minimal",
		"/srv/rootfs":                  "dir:/srv/rootfs",
		"dir:/srv/rootfs":              "dir:/srv/rootfs",
		"tar:/tmp/a.tar.gz":            "tar:/tmp/a.tar.gz",
		"debootstrap:bookworm+git,vim": "debootstrap:bookworm+git,vim",
		"oci:/srv/layout#app:1":        "oci:/srv/layout#app:1",
		"docker-archive:/srv/img.tar":  "docker-archive:/srv/img.tar",
	}
	for in, want := range good {
		if got, err := s.normaliseSource(context.Background(), service.Caller{}, in); err != nil || got != want {
			t.Errorf("normaliseSource(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "relative/dir", "dir:relative", "oci:x", "docker-archive:img.tar", "debootstrap:", "debootstrap:a b", "tar:/a\x00b", "builtin:base", "snapshot:", "snapshot:../x", "snapshot:Sn-A"} {
		if _, err := s.normaliseSource(context.Background(), service.Caller{}, in); err == nil {
			t.Errorf("normaliseSource(%q) accepted", in)
		}
	}
}

func TestValidateCmd(t *testing.T) {
	if err := validateCmd([]string{"ls", "-l"}, map[string]string{"A": "b"}, "/tmp"); err != nil {
		t.Error(err)
	}
	bad := []struct {
		cmd []string
		env map[string]string
		cwd string
	}{
		{nil, nil, ""},
		{[]string{""}, nil, ""},
		{[]string{"a\x00"}, nil, ""},
		{[]string{"a"}, map[string]string{"A=B": "c"}, ""},
		{[]string{"a"}, map[string]string{"": "c"}, ""},
		{[]string{"a"}, nil, "/t\x00"},
		{[]string{strings.Repeat("a", 2<<20)}, nil, ""},
	}
	for _, b := range bad {
		if err := validateCmd(b.cmd, b.env, b.cwd); err == nil {
			t.Errorf("validateCmd(%.20q, %v, %q) accepted", b.cmd, b.env, b.cwd)
		}
	}
}

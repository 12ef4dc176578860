package node

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

// TestCredentialClientErrors: the control plane's refusals come back as
// error classes the interceptor acts on (429 → rate limited, 403 → no rule
// for the host, anything unreadable → unavailable); a success carries the
// secret and the node's own credential was sent.
func TestCredentialClientErrors(t *testing.T) {
	var answer func(w http.ResponseWriter)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer node-credential" || r.URL.Path != nodev1.ResolveCredentialPath("n1") {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		answer(w)
	}))
	defer srv.Close()
	c := &CredentialClient{Server: srv.URL, Credential: func() string { return "node-credential" }, NodeID: "n1"}
	fail := func(status int, code string) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(sandboxv1.Error{Code: code, Message: "refused"})
		}
	}
	for _, tc := range []struct {
		answer func(w http.ResponseWriter)
		want   error
	}{
		{fail(http.StatusTooManyRequests, sandboxv1.CodeRateLimited), errdefs.ErrResourceExhausted},
		{fail(http.StatusForbidden, sandboxv1.CodePermissionDenied), errdefs.ErrPermissionDenied},
		{fail(http.StatusNotFound, sandboxv1.CodeNotFound), errdefs.ErrNotFound},
		{fail(http.StatusPreconditionFailed, sandboxv1.CodeFailedPrecondition), errdefs.ErrFailedPrecondition},
		{func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) }, errdefs.ErrUnavailable},
	} {
		answer = tc.answer
		if _, err := c.resolve(context.Background(), nodev1.ResolveCredential{SandboxID: "s", ExecID: "e", Host: "h"}); !errors.Is(err, tc.want) {
			t.Errorf("resolve = %v, want %v", err, tc.want)
		}
	}
	answer = func(w http.ResponseWriter) {
		json.NewEncoder(w).Encode(nodev1.ResolvedCredential{Applies: true, ID: "c1", Method: "header", Name: "Authorization", Secret: []byte("s3cret")})
	}
	r, err := c.resolve(context.Background(), nodev1.ResolveCredential{SandboxID: "s", ExecID: "e", Host: "h"})
	if err != nil || string(r.Secret) != "s3cret" || r.Method != "header" {
		t.Fatalf("resolve = %+v, %v", r, err)
	}
}

// TestAppliesCached: the control plane is asked once per host per TTL, not
// on every TLS connection; errors are not cached.
func TestAppliesCached(t *testing.T) {
	asked := map[string]int{}
	fail := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req nodev1.ResolveCredential
		json.NewDecoder(r.Body).Decode(&req)
		asked[req.Host]++
		if fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		json.NewEncoder(w).Encode(nodev1.ResolvedCredential{Applies: req.Host == "api.example.com"})
	}))
	defer srv.Close()
	now := time.Unix(1000, 0)
	ci := &credentialInterceptor{creds: execCredentials{c: &CredentialClient{Server: srv.URL, NodeID: "n1", Credential: func() string { return "c" }}, sandbox: "s", execID: "e"},
		now: func() time.Time { return now }}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if !ci.Applies(ctx, "api.example.com") || ci.Applies(ctx, "other.example.com") {
			t.Fatal("wrong answer")
		}
	}
	if asked["api.example.com"] != 1 || asked["other.example.com"] != 1 {
		t.Fatalf("asked %v, want once per host", asked)
	}
	now = now.Add(appliesTTL)
	fail = true
	if ci.Applies(ctx, "api.example.com") {
		t.Error("an unanswered check applied")
	}
	fail = false
	if !ci.Applies(ctx, "api.example.com") || asked["api.example.com"] != 3 {
		t.Errorf("after expiry and a failure: asked %v, want 3 asks", asked)
	}
}

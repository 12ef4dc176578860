package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

// TestCredentialClientErrors: the control plane's refusals come back as
// error classes the interceptor acts on (429 → rate limited, 403 → no rule
// for the host, anything unreadable → unavailable); a success carries the
// secret and the node's own credential was sent.
func TestCredentialClientErrors(t *testing.T) {
	var answer func() (*nodev1.ResolvedCredential, error)
	url := (&fakeControlPlane{resolve: func(bearer, nodeID string, _ nodev1.ResolveCredential) (*nodev1.ResolvedCredential, error) {
		if bearer != "node-credential" || nodeID != "n1" {
			return nil, fmt.Errorf("%w: bearer %q node %q", errdefs.ErrUnauthenticated, bearer, nodeID)
		}
		return answer()
	}}).serve(t)
	c := &CredentialClient{Server: url, Credential: func() string { return "node-credential" }, NodeID: "n1"}
	fail := func(err error) func() (*nodev1.ResolvedCredential, error) {
		return func() (*nodev1.ResolvedCredential, error) { return nil, fmt.Errorf("refused: %w", err) }
	}
	for _, tc := range []struct {
		answer func() (*nodev1.ResolvedCredential, error)
		want   error
	}{
		{fail(errdefs.ErrRateLimited), errdefs.ErrRateLimited},
		{fail(errdefs.ErrPermissionDenied), errdefs.ErrPermissionDenied},
		{fail(errdefs.ErrNotFound), errdefs.ErrNotFound},
		{fail(errdefs.ErrFailedPrecondition), errdefs.ErrFailedPrecondition},
		// An error of no class: the node treats it as the control plane
		// being unavailable.
		{fail(errors.New("broken")), errdefs.ErrUnavailable},
	} {
		answer = tc.answer
		if _, err := c.resolve(context.Background(), nodev1.ResolveCredential{SandboxID: "s", ExecID: "e", Host: "h"}); !errors.Is(err, tc.want) {
			t.Errorf("resolve = %v, want %v", err, tc.want)
		}
	}
	answer = func() (*nodev1.ResolvedCredential, error) {
		return &nodev1.ResolvedCredential{Applies: true, ID: "c1", Method: "header", Name: "Authorization", Secret: []byte("s3cret")}, nil
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
	url := (&fakeControlPlane{resolve: func(_, _ string, req nodev1.ResolveCredential) (*nodev1.ResolvedCredential, error) {
		asked[req.Host]++
		if fail {
			return nil, fmt.Errorf("%w: store down", errdefs.ErrUnavailable)
		}
		return &nodev1.ResolvedCredential{Applies: req.Host == "api.example.com"}, nil
	}}).serve(t)
	now := time.Unix(1000, 0)
	ci := &credentialInterceptor{creds: execCredentials{c: &CredentialClient{Server: url, NodeID: "n1", Credential: func() string { return "c" }}, sandbox: "s", execID: "e"},
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

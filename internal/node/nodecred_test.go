package node

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

// TestNodeCredential: the credential of a heartbeat answer is kept (an
// answer without one keeps it), and the credential client sends it; with
// none yet it asks nothing and says the node is not ready.
func TestNodeCredential(t *testing.T) {
	m := &Manager{}
	if got := m.Credential(); got != "" {
		t.Fatalf("credential before any heartbeat = %q", got)
	}
	m.setCredential("cred-1")
	m.setCredential("")
	if got := m.Credential(); got != "cred-1" {
		t.Fatalf("credential = %q, want cred-1 kept across an answer without one", got)
	}

	var asked atomic.Int32
	var sent atomic.Value
	url := (&fakeControlPlane{resolve: func(bearer, _ string, _ nodev1.ResolveCredential) (*nodev1.ResolvedCredential, error) {
		asked.Add(1)
		sent.Store("Bearer " + bearer)
		return &nodev1.ResolvedCredential{Applies: true}, nil
	}}).serve(t)
	c := &CredentialClient{Server: url, NodeID: "n1", Credential: func() string { return "" }}
	_, err := c.resolve(context.Background(), nodev1.ResolveCredential{SandboxID: "s", ExecID: "e", Host: "h", CheckOnly: true})
	if !errors.Is(err, errdefs.ErrUnavailable) || asked.Load() != 0 {
		t.Fatalf("without a credential: %v after %d requests, want unavailable and none", err, asked.Load())
	}
	c.Credential = m.Credential
	if _, err := c.resolve(context.Background(), nodev1.ResolveCredential{SandboxID: "s", ExecID: "e", Host: "h", CheckOnly: true}); err != nil {
		t.Fatal(err)
	}
	if got := sent.Load(); got != "Bearer cred-1" {
		t.Errorf("Authorization %q, want the node's credential", got)
	}
}

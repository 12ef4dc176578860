package node

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/privop"
)

func TestCheckCapability(t *testing.T) {
	m, err := NewManager(Config{NodeID: "node-a", DataDir: t.TempDir(), Privileged: privop.NewClient("/nonexistent"), HostBridge: "/bin/true"},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	agreeClock(t, m)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	rec := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g8-x", SandboxID: "sb1", Generation: 8, ActivationID: "a-1", Runtime: "ns"}}
	id := capability.Identity{Sandbox: "sb1", Generation: 8, Node: "node-a", Substrate: "ns", Activation: "a-1"}
	mint := func(id capability.Identity, op capability.Op) string {
		tok, err := signer.Mint(id, op, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		return capability.Encode(tok)
	}
	now := time.Now()
	if err := m.checkCapability(mint(id, capability.OpExec), rec, capability.OpExec, now); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("before any keys: %v, want unavailable", err)
	}
	if err := m.SetKeys(capability.KeySetFor(1, signer)); err != nil {
		t.Fatal(err)
	}
	other := id
	other.Sandbox = "sb2"
	older := id
	older.Generation = 7
	wrongNode := id
	wrongNode.Node = "node-b"
	tests := []struct {
		name   string
		header string
		op     capability.Op
		want   error
	}{
		{"this execution", mint(id, capability.OpExec), capability.OpExec, nil},
		{"no capability", "", capability.OpExec, errdefs.ErrPermissionDenied},
		{"garbage", "!!!", capability.OpExec, errdefs.ErrPermissionDenied},
		{"other sandbox", mint(other, capability.OpExec), capability.OpExec, errdefs.ErrPermissionDenied},
		{"files with an exec capability", mint(id, capability.OpExec), capability.OpFiles, errdefs.ErrPermissionDenied},
		{"generation 7 at a node that installed 8", mint(older, capability.OpExec), capability.OpExec, errRefreshRoute},
		{"routed to the wrong node", mint(wrongNode, capability.OpExec), capability.OpExec, errRefreshRoute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := m.checkCapability(tt.header, rec, tt.op, now)
			if !errors.Is(err, tt.want) && !(tt.want == nil && err == nil) {
				t.Fatalf("checkCapability = %v, want %v", err, tt.want)
			}
		})
	}
	if err := m.checkCapability(mint(id, capability.OpExec), rec, capability.OpExec, now.Add(capability.Lifetime+capability.Skew+time.Second)); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("expired capability: %v", err)
	}
	// The keys survive a restart of the node.
	m2, _ := NewManager(Config{NodeID: "node-a", DataDir: m.cfg.DataDir, Privileged: m.cfg.Privileged, HostBridge: "/bin/true"}, m.log)
	// Fail closed until the first heartbeat answer measures the clock.
	if err := m2.checkCapability(mint(id, capability.OpExec), rec, capability.OpExec, now); !errors.Is(err, errClock) {
		t.Errorf("after restart, before a clock measure: %v, want the clock refusal", err)
	}
	agreeClock(t, m2)
	if err := m2.checkCapability(mint(id, capability.OpExec), rec, capability.OpExec, now); err != nil {
		t.Errorf("after restart: %v", err)
	}
}

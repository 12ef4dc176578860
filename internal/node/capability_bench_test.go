package node

import (
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/privop"
)

// BenchmarkCheckCapability is the node's added work per guest request:
// decode, verify and compare the capability with the runtime record.
func BenchmarkCheckCapability(b *testing.B) {
	m, err := NewManager(Config{NodeID: "n1", DataDir: b.TempDir(), Privileged: privop.NewClient("/nonexistent"), HostBridge: "/bin/true"},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	agreeClock(b, m)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	if err := m.SetKeys(capability.KeySetFor(1, signer)); err != nil {
		b.Fatal(err)
	}
	rec := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g3-x", SandboxID: "sb1", Generation: 3, ActivationID: "a-1", Runtime: "vm"}}
	tok, _ := signer.Mint(capability.Identity{Sandbox: "sb1", Generation: 3, Node: "n1", Substrate: "vm", Activation: "a-1"}, capability.OpExec, 0, "")
	header := capability.Encode(tok)
	for b.Loop() {
		if err := m.checkCapability(header, rec, capability.OpExec, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}

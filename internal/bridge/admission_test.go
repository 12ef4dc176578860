package bridge

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/capability"
)

// BenchmarkAdmission is the bridge's added work per request: decode, verify
// and compare one capability.
func BenchmarkAdmission(b *testing.B) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	id := capability.Identity{Sandbox: "sb1", Generation: 3, Node: "n1", Substrate: "vm", Activation: "a-1"}
	tok, _ := signer.Mint(id, capability.OpExec, 0, "")
	header := capability.Encode(tok)
	a := admission{now: time.Now}
	a.setKeys(capability.KeySetFor(1, signer))
	a.install(id)
	a.setClock(ClockRequest{Agreed: true})
	for b.Loop() {
		if err := a.check(header, capability.OpExec); err != nil {
			b.Fatal(err)
		}
	}
}

package capability

import (
	"crypto/ed25519"
	"sync"
	"time"
)

// VerifierEntries bounds the tokens a Verifier remembers; when full it
// forgets them all and starts again.
const VerifierEntries = 4096

// Verifier is Verify that remembers the tokens whose signature it checked.
// The control plane mints one capability per sandbox and operation and sends
// it with every request for its lifetime, so a node and a host bridge see the
// same bytes again and again; the Ed25519 verification is most of a check's
// cost (BenchmarkVerifier) and it gives the same answer for the same bytes
// and keys. A remembered token is one that verified under the same key set
// (the same *KeySet: a node or bridge installs a new set as a new value, and
// the Verifier then forgets everything) and whose signing key the set still
// holds, unchanged; its validity window is checked against now on every
// call, as Verify does, and a token not remembered is verified in full.
// Only tokens that verified are remembered. Safe for concurrent use; the
// zero value is ready.
type Verifier struct {
	mu   sync.Mutex
	keys *KeySet
	seen map[string]verified
}

// verified is a token's content and the key its signature verified with.
type verified struct {
	c   Capability
	key ed25519.PublicKey
}

// Verify is capability.Verify(token, keys, now).
func (v *Verifier) Verify(token []byte, keys *KeySet, now time.Time) (*Capability, error) {
	v.mu.Lock()
	if v.keys != keys {
		v.keys, v.seen = keys, nil
	}
	seen, ok := v.seen[string(token)]
	v.mu.Unlock()
	if ok && keys != nil && seen.key.Equal(keys.Keys[seen.c.KeyID]) {
		c := seen.c
		if err := checkWindow(&c, now); err != nil {
			return nil, err
		}
		return &c, nil
	}
	c, err := Verify(token, keys, now)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	if v.keys == keys {
		if v.seen == nil || len(v.seen) >= VerifierEntries {
			v.seen = make(map[string]verified)
		}
		v.seen[string(token)] = verified{c: *c, key: keys.Keys[c.KeyID]}
	}
	v.mu.Unlock()
	return c, nil
}

package localstore

import (
	"bytes"
	"testing"

	"github.com/spacesandbox/space/internal/seal"
)

// FuzzDecodeDocument: arbitrary plaintext (as if the key leaked and an
// attacker re-encrypted the store) never panics and only yields valid,
// unique credentials.
func FuzzDecodeDocument(f *testing.F) {
	f.Add([]byte(`{"version":1,"credentials":[{"id":"a","scope":{"tenant":"t"},"name":"n","secret":"dTpw","injection":{"method":"basic"},"allowed_hosts":["*.a.com"]}]}`))
	f.Add([]byte(`{"version":1,"credentials":[]}`))
	f.Add([]byte(`{"version":2}`))
	f.Fuzz(func(t *testing.T, plain []byte) {
		doc, err := decodeDocument(plain)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, r := range doc.Credentials {
			if err := r.credential().Validate(); err != nil || seen[r.ID] {
				t.Fatalf("accepted invalid or duplicate credential %s: %v", r.ID, err)
			}
			seen[r.ID] = true
		}
	})
}

// FuzzOpenDoc: arbitrary store file bytes never panic and never authenticate.
func FuzzOpenDoc(f *testing.F) {
	key := bytes.Repeat([]byte{7}, KeyLen)
	sealer, _ := seal.New(key)
	fp := fingerprint(key)
	f.Add(sealDoc(sealer, fp, []byte(`{"version":1}`)))
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := openDoc(sealer, fp, data); err == nil {
			// Only a genuine seal authenticates; the seed corpus holds one.
			if !bytes.HasPrefix(data, []byte(magic)) {
				t.Fatalf("non-store bytes authenticated")
			}
		}
	})
}

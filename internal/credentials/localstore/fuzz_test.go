package localstore

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"testing"
)

// FuzzParseKey: arbitrary key file bytes never panic, and only exactly 64
// hex digits (plus one newline) parse.
func FuzzParseKey(f *testing.F) {
	f.Add([]byte("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n"))
	f.Add([]byte("zz"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		key, err := parseKey(data)
		if err != nil {
			return
		}
		if len(key) != KeyLen || len(bytes.TrimSuffix(data, []byte("\n"))) != 2*KeyLen {
			t.Fatalf("parsed %d-byte key from %q", len(key), data)
		}
	})
}

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

// FuzzOpen: arbitrary store file bytes never panic and never authenticate.
func FuzzOpen(f *testing.F) {
	key := bytes.Repeat([]byte{7}, KeyLen)
	block, _ := aes.NewCipher(key)
	aead, _ := cipher.NewGCM(block)
	fp := fingerprint(key)
	f.Add(seal(aead, fp, []byte(`{"version":1}`)))
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := open(aead, fp, data); err == nil {
			// Only a genuine seal authenticates; the seed corpus holds one.
			if !bytes.HasPrefix(data, []byte(magic)) {
				t.Fatalf("non-store bytes authenticated")
			}
		}
	})
}

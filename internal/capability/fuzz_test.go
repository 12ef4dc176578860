package capability

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"testing"
	"time"
)

// FuzzDecode: the text form has one spelling per token (strict base64url,
// no padding, no line breaks): whatever Decode accepts, Encode gives back
// exactly.
func FuzzDecode(f *testing.F) {
	s, _ := testSigner(f, "k1")
	tok, _ := s.Mint(exec8, OpExec, 0, "")
	text := Encode(tok)
	f.Add(text)
	f.Add(text + "=")
	f.Add(text[:10] + "\n" + text[10:])
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := Decode(s)
		if err != nil {
			return
		}
		if again := Encode(b); again != s {
			t.Fatalf("Decode(%q) accepted, but the token's text is %q", s, again)
		}
	})
}

// FuzzKeySet: a key set that parses holds only usable keys, each of which
// refuses the universal forgery (identity, 0), and it survives a round trip.
func FuzzKeySet(f *testing.F) {
	s, _ := testSigner(f, "k1")
	f.Add([]byte(fmt.Sprintf(`{"version":1,"keys":{"k1":%q}}`, hex.EncodeToString(s.PublicKey()))))
	f.Add([]byte(`{"version":1,"keys":{"k1":"0100000000000000000000000000000000000000000000000000000000000000"}}`))
	f.Add([]byte(`{"version":1,"keys":{"k1":"0000000000000000000000000000000000000000000000000000000000000000"}}`))
	f.Add([]byte(`{"version":1,"keys":{"k1":"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"}}`))
	forged := append(append([]byte{1}, make([]byte, 31)...), make([]byte, 32)...)
	f.Fuzz(func(t *testing.T, b []byte) {
		var ks KeySet
		if err := ks.UnmarshalJSON(b); err != nil {
			return
		}
		now := time.Unix(1_800_000_000, 0)
		for id, k := range ks.Keys {
			if !validPublicKey(k) || smallOrder(k) {
				t.Fatalf("key %q = %x parsed", id, []byte(k))
			}
			msg, err := encode(&Capability{KeyID: id, Identity: exec8, Ops: OpExec, IssuedAt: now, ExpiresAt: now.Add(Lifetime)})
			if err != nil {
				continue
			}
			if _, err := Verify(append(msg, forged...), &ks, now); err == nil {
				t.Fatalf("the (identity, 0) forgery verified under key %x", []byte(k))
			}
		}
		out, err := ks.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var back KeySet
		if err := back.UnmarshalJSON(out); err != nil || back.Version != ks.Version || len(back.Keys) != len(ks.Keys) {
			t.Fatalf("round trip: %+v, %v", back, err)
		}
		for id, k := range ks.Keys {
			if !bytes.Equal(back.Keys[id], k) || len(k) != ed25519.PublicKeySize {
				t.Fatalf("round trip changed key %q", id)
			}
		}
	})
}

package capability

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// signAt signs c with s's key as the control plane would, whatever the
// signer's clock: tests of the window need tokens issued in the future.
func signAt(t *testing.T, s *Signer, c Capability) []byte {
	t.Helper()
	c.KeyID = s.KeyID()
	msg, err := encode(&c)
	if err != nil {
		t.Fatal(err)
	}
	return append(msg, ed25519.Sign(s.key, msg)...)
}

// TestValidityWindow pins both ends of the window (catalogue E-1, E-2):
// from IssuedAt-Skew to ExpiresAt+Skew, and nothing outside it.
func TestValidityWindow(t *testing.T) {
	s, keys := testSigner(t, "k1")
	iat := time.Unix(1_800_000_000, 0)
	exp := iat.Add(Lifetime)
	tok := signAt(t, s, Capability{Identity: exec8, Ops: OpExec, IssuedAt: iat, ExpiresAt: exp})
	for _, tc := range []struct {
		name string
		at   time.Time
		want error
	}{
		{"an hour before issue", iat.Add(-time.Hour), ErrNotYetValid},
		{"iat-16s", iat.Add(-Skew - time.Second), ErrNotYetValid},
		{"iat-15s", iat.Add(-Skew), nil},
		{"iat", iat, nil},
		{"exp", exp, nil},
		{"exp+15s", exp.Add(Skew), nil},
		{"exp+16s", exp.Add(Skew + time.Second), ErrExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tok, keys, tc.at)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify at %s: %v, want %v", tc.name, err, tc.want)
			}
		})
	}
}

// TestFutureIssuedTokenIsRefused is the probe of the audit (E-2): a token the
// control plane issued an hour ahead, presented now.
func TestFutureIssuedTokenIsRefused(t *testing.T) {
	s, keys := testSigner(t, "k1")
	now := time.Now().Truncate(time.Second)
	tok := signAt(t, s, Capability{Identity: exec8, Ops: OpExec, IssuedAt: now.Add(time.Hour), ExpiresAt: now.Add(time.Hour + Lifetime)})
	_, err := Verify(tok, keys, now)
	if !errors.Is(err, ErrNotYetValid) {
		t.Fatalf("a token issued an hour from now: %v, want ErrNotYetValid", err)
	}
	if errors.Is(err, ErrExpired) || errors.Is(err, ErrMalformed) {
		t.Errorf("not-yet-valid must be its own error: %v", err)
	}
}

// TestLifetimeShape: exp-iat is positive and at most Lifetime (E-3).
func TestLifetimeShape(t *testing.T) {
	s, keys := testSigner(t, "k1")
	iat := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name string
		exp  time.Time
		want error
	}{
		{"exactly Lifetime", iat.Add(Lifetime), nil},
		{"Lifetime+1s", iat.Add(Lifetime + time.Second), ErrMalformed},
		{"exp == iat", iat, ErrMalformed},
		{"exp before iat", iat.Add(-time.Second), ErrMalformed},
	} {
		tok := signAt(t, s, Capability{Identity: exec8, Ops: OpExec, IssuedAt: iat, ExpiresAt: tc.exp})
		if _, err := Verify(tok, keys, iat); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// identityKey is the encoding of the neutral point: ed25519.Verify accepts
// the signature (identity, 0) for any message under it.
var identityKey = ed25519.PublicKey(append([]byte{1}, make([]byte, 31)...))

// TestSmallOrderKeysVerifyNothing (E-5): a key set holding the identity point
// or the all-zero key would let anyone forge. Go's ed25519 accepts the
// forgeries; Verify must not, and UnmarshalJSON refuses such key sets.
func TestSmallOrderKeysVerifyNothing(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	forge := func(kid string, pub ed25519.PublicKey) []byte {
		// The forged signature R = identity, S = 0 verifies whenever
		// [k]A is the identity: always for order 1, one message in 4
		// for order 4. Vary the generation until Go's Verify accepts.
		sig := append(append([]byte{1}, make([]byte, 31)...), make([]byte, 32)...)
		for g := uint64(1); g < 1000; g++ {
			id := exec8
			id.Generation = g
			msg, _ := encode(&Capability{KeyID: kid, Identity: id, Ops: OpExec | OpFiles | OpLifecycle, IssuedAt: now, ExpiresAt: now.Add(Lifetime)})
			if ed25519.Verify(pub, msg, sig) {
				return append(msg, sig...)
			}
		}
		t.Fatalf("could not forge under key %x", []byte(pub))
		return nil
	}
	for _, tc := range []struct {
		name string
		pub  ed25519.PublicKey
	}{
		{"identity", identityKey},
		{"all zero", make(ed25519.PublicKey, 32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := forge("k1", tc.pub)
			keys := &KeySet{Version: 1, Keys: map[string]ed25519.PublicKey{"k1": tc.pub}}
			if c, err := Verify(tok, keys, now); err == nil {
				t.Fatalf("a forgery under the %s key verified: %+v", tc.name, c)
			}
			js := fmt.Sprintf(`{"version":1,"keys":{"k1":%q}}`, hex.EncodeToString(tc.pub))
			if err := new(KeySet).UnmarshalJSON([]byte(js)); err == nil {
				t.Fatalf("a key set with the %s key was accepted", tc.name)
			}
		})
	}
}

// TestKeySetRefusesBadKeys (E-5): every key a key set parses is 32 bytes,
// canonical, on the curve, and not of small order.
func TestKeySetRefusesBadKeys(t *testing.T) {
	s, _ := testSigner(t, "k1")
	good := hex.EncodeToString(s.PublicKey())
	p := yAbove(0)
	pMinus1 := yAbove(-1)
	var offCurve string
	for i := byte(2); ; i++ {
		k := make([]byte, 32)
		k[0] = i
		if !validPublicKey(k) && !smallOrder(k) {
			offCurve = hex.EncodeToString(k)
			break
		}
	}
	for _, tc := range []struct{ name, key string }{
		{"31 bytes", good[:62]},
		{"33 bytes", good + "00"},
		{"empty", ""},
		{"all zero", strings.Repeat("00", 32)},
		{"all zero with the sign bit", strings.Repeat("00", 31) + "80"},
		{"identity", hex.EncodeToString(identityKey)},
		{"identity with the sign bit", "01" + strings.Repeat("00", 30) + "80"},
		{"order 2 (y = -1)", hex.EncodeToString(pMinus1[:])},
		{"order 8", hex.EncodeToString(smallOrderY[2][:])},
		{"order 8, other sign", hex.EncodeToString(smallOrderY[3][:])},
		{"non-canonical zero (y = p)", hex.EncodeToString(p[:])},
		{"not on the curve", offCurve},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := fmt.Sprintf(`{"version":1,"keys":{"k1":%q}}`, tc.key)
			if err := new(KeySet).UnmarshalJSON([]byte(js)); err == nil {
				t.Fatalf("key set with a %s key accepted", tc.name)
			}
		})
	}
	// And a real key still parses.
	var ks KeySet
	if err := json.Unmarshal([]byte(fmt.Sprintf(`{"version":1,"keys":{"k1":%q}}`, good)), &ks); err != nil {
		t.Fatalf("a real key refused: %v", err)
	}
	for range 64 {
		s, _ := testSigner(t, "k")
		if !validPublicKey(s.PublicKey()) {
			t.Fatalf("generated key %x judged invalid", []byte(s.PublicKey()))
		}
	}
}

// TestFormatConfusion (E-6): one format, version 1, Ed25519 only; nothing in
// the token chooses the algorithm.
func TestFormatConfusion(t *testing.T) {
	s, keys := testSigner(t, "k1")
	now := time.Now()
	tok, _ := s.Mint(exec8, OpExec, 0, "")
	msg := tok[:len(tok)-ed25519.SignatureSize]
	b64 := base64.RawURLEncoding.EncodeToString

	v2 := bytes.Clone(msg)
	v2[0] = 2
	v2 = append(v2, ed25519.Sign(s.key, v2)...)
	v0 := bytes.Clone(msg)
	v0[0] = 0
	v0 = append(v0, ed25519.Sign(s.key, v0)...)

	claims := fmt.Sprintf(`{"sub":%q,"gen":8,"ops":7,"iat":%d,"exp":%d,"kid":"k1"}`, exec8.Sandbox, now.Unix(), now.Add(Lifetime).Unix())
	jwtNone := b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + b64([]byte(claims)) + "."
	hs := b64([]byte(`{"alg":"HS256","typ":"JWT","kid":"k1"}`)) + "." + b64([]byte(claims))
	mac := hmac.New(sha256.New, s.PublicKey())
	mac.Write([]byte(hs))
	jwtHMAC := hs + "." + b64(mac.Sum(nil))
	hsEdDSA := b64([]byte(`{"alg":"EdDSA","typ":"JWT","kid":"k1"}`)) + "." + b64([]byte(claims))
	jwtEdDSA := hsEdDSA + "." + b64(ed25519.Sign(s.key, []byte(hsEdDSA)))

	// Our own message with an HMAC keyed by the public key in place of the
	// signature, padded to the signature's length.
	m := hmac.New(sha256.New, s.PublicKey())
	m.Write(msg)
	hmacSig := append(m.Sum(nil), make([]byte, 32)...)

	for _, tc := range []struct {
		name, text string
	}{
		{"version 2, validly signed", b64(v2)},
		{"version 0, validly signed", b64(v0)},
		{"JWT alg:none", jwtNone},
		{"JWT HS256 keyed with the public key", jwtHMAC},
		{"JWT EdDSA signed with the real key", jwtEdDSA},
		{"message with HMAC(public key) as signature", b64(append(bytes.Clone(msg), hmacSig...))},
		{"message with no signature", b64(msg)},
		{"message with a zero signature", b64(append(bytes.Clone(msg), make([]byte, 64)...))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Decode(tc.text)
			if err == nil {
				var c *Capability
				if c, err = Verify(b, keys, now); err == nil {
					t.Fatalf("verified: %+v", c)
				}
			}
		})
	}
}

// TestNonCanonicalS (E-4): a signature whose S is not reduced (S+L) is the
// same signature to a lax verifier; Go's ed25519 refuses it and Verify with it.
func TestNonCanonicalS(t *testing.T) {
	s, keys := testSigner(t, "k1")
	tok, _ := s.Mint(exec8, OpExec, 0, "")
	sig := tok[len(tok)-ed25519.SignatureSize:]
	// L = 2^252 + 27742317777372353535851937790883648493, little endian.
	l := []byte{0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}
	sPlusL := make([]byte, 32)
	carry := 0
	for i := range 32 {
		v := int(sig[32+i]) + int(l[i]) + carry
		sPlusL[i], carry = byte(v), v>>8
	}
	if carry != 0 {
		t.Skip("S+L overflows 256 bits for this signature")
	}
	bad := append(bytes.Clone(tok[:len(tok)-32]), sPlusL...)
	if _, err := Verify(bad, keys, time.Now()); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("signature with S+L: %v, want ErrBadSignature", err)
	}
}

// TestCanonicalEncoding (E-7): one token has one byte form and one text form.
func TestCanonicalEncoding(t *testing.T) {
	s, keys := testSigner(t, "k1")
	now := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return now }
	tok, _ := s.Mint(exec8, OpExec, 0, "")
	text := Encode(tok)

	t.Run("overlong uvarint", func(t *testing.T) {
		// The generation 8 as 0x88 0x00 instead of 0x08, re-signed: a
		// valid signature over a non-minimal encoding.
		c := Capability{KeyID: "k1", Identity: exec8, Ops: OpExec, IssuedAt: now, ExpiresAt: now.Add(Lifetime)}
		msg, _ := encode(&c)
		c.Generation = 0
		pre, _ := encode(&c)
		// pre and msg differ at the generation byte only.
		i := 0
		for pre[i] == msg[i] {
			i++
		}
		long := append(append(bytes.Clone(msg[:i]), 0x88, 0x00), msg[i+1:]...)
		if v, n := binary.Uvarint(long[i:]); v != 8 || n != 2 {
			t.Fatalf("test setup: uvarint %d/%d", v, n)
		}
		bad := append(long, ed25519.Sign(s.key, long)...)
		if _, err := Verify(bad, keys, now); !errors.Is(err, ErrMalformed) {
			t.Fatalf("overlong uvarint: %v, want ErrMalformed", err)
		}
		if _, err := decode(long); err == nil {
			t.Fatal("decode took an overlong uvarint")
		}
	})
	t.Run("strict base64", func(t *testing.T) {
		// The last character of an unpadded text carries 2 or 4 unused
		// bits (zero in the canonical form); set the lowest.
		if len(tok)%3 == 0 {
			t.Skip("token length is a multiple of 3: no unused bits")
		}
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		idx := strings.IndexByte(alphabet, text[len(text)-1])
		alt := text[:len(text)-1] + string(alphabet[idx|1])
		if alt == text {
			t.Fatal("test setup: no unused bit to set")
		}
		if _, err := Decode(alt); !errors.Is(err, ErrMalformed) {
			t.Errorf("text with a non-zero unused bit: %v, want ErrMalformed", err)
		}
		for _, bad := range []string{text + "=", text + "==", text[:10] + "\n" + text[10:], text[:10] + "\r" + text[10:],
			strings.NewReplacer("-", "+", "_", "/").Replace(text) + "+/", " " + text} {
			if _, err := Decode(bad); err == nil {
				t.Errorf("Decode(%q) accepted", bad)
			}
		}
	})
	t.Run("mixed-case ids", func(t *testing.T) {
		c, err := Verify(tok, keys, now)
		if err != nil {
			t.Fatal(err)
		}
		for _, installed := range []Identity{
			{Sandbox: "SB1", Generation: 8, Node: "node-a", Substrate: "vm", Activation: "a-1"},
			{Sandbox: "sb1", Generation: 8, Node: "Node-A", Substrate: "vm", Activation: "a-1"},
			{Sandbox: "sb1", Generation: 8, Node: "node-a", Substrate: "VM", Activation: "a-1"},
			{Sandbox: "sb1", Generation: 8, Node: "node-a", Substrate: "vm", Activation: "A-1"},
		} {
			if d, _ := Compare(c, installed, Request{Op: OpExec}); d == Allow {
				t.Errorf("a capability for %+v allowed at %+v", c.Identity, installed)
			}
		}
		upper := &KeySet{Version: 1, Keys: map[string]ed25519.PublicKey{"K1": s.PublicKey()}}
		if _, err := Verify(tok, upper, now); !errors.Is(err, ErrUnknownKey) {
			t.Errorf("key id k1 found under K1: %v", err)
		}
	})
}

// TestRefusedKeySetChangesNothing: a key set that fails to parse leaves the
// one it was decoded into as it was.
func TestRefusedKeySetChangesNothing(t *testing.T) {
	s, keys := testSigner(t, "k1")
	before := len(keys.Keys)
	js := fmt.Sprintf(`{"version":9,"keys":{"k0":%q,"k1":"%s"}}`, hex.EncodeToString(s.PublicKey()), hex.EncodeToString(identityKey))
	if err := keys.UnmarshalJSON([]byte(js)); err == nil {
		t.Fatal("a key set with the identity key parsed")
	}
	if keys.Version != 1 || len(keys.Keys) != before || !bytes.Equal(keys.Keys["k1"], s.PublicKey()) {
		t.Fatalf("a refused key set changed the one it was decoded into: %+v", keys)
	}
}

package capability

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"
)

func testSigner(t testing.TB, kid string) (*Signer, *KeySet) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(kid, priv)
	if err != nil {
		t.Fatal(err)
	}
	return s, &KeySet{Version: 1, Keys: map[string]ed25519.PublicKey{kid: s.PublicKey()}}
}

var exec8 = Identity{Sandbox: "sb1", Generation: 8, Node: "node-a", Substrate: "vm", Activation: "a-1"}

func TestMintVerifyRoundTrip(t *testing.T) {
	s, keys := testSigner(t, "k1")
	now := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return now }
	tok, err := s.Mint(exec8, OpExec|OpFiles, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Verify(tok, keys, now)
	if err != nil {
		t.Fatal(err)
	}
	if c.Identity != exec8 || c.Ops != OpExec|OpFiles || c.KeyID != "k1" || !c.ExpiresAt.Equal(now.Add(Lifetime)) {
		t.Fatalf("verified %+v", c)
	}
	text := Encode(tok)
	back, err := Decode(text)
	if err != nil || !bytes.Equal(back, tok) {
		t.Fatalf("text form does not round-trip: %v", err)
	}
}

func TestExpiryAndSkew(t *testing.T) {
	s, keys := testSigner(t, "k1")
	now := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return now }
	tok, _ := s.Mint(exec8, OpExec, 0, "")
	for _, tc := range []struct {
		at   time.Duration
		want error
	}{
		{0, nil},
		{Lifetime, nil},
		{Lifetime + Skew, nil},
		{Lifetime + Skew + time.Second, ErrExpired},
		{time.Hour, ErrExpired},
	} {
		if _, err := Verify(tok, keys, now.Add(tc.at)); !errors.Is(err, tc.want) {
			t.Errorf("verify at +%s: %v, want %v", tc.at, err, tc.want)
		}
	}
}

func TestTamperingIsRefused(t *testing.T) {
	s, keys := testSigner(t, "k1")
	tok, _ := s.Mint(exec8, OpExec, 0, "")
	for i := range tok {
		bad := bytes.Clone(tok)
		bad[i] ^= 0x01
		if _, err := Verify(bad, keys, time.Now()); err == nil {
			t.Fatalf("token with byte %d flipped verified", i)
		}
	}
	// Another signer's key id collision is a bad signature, not a pass.
	other, _ := testSigner(t, "k1")
	forged, _ := other.Mint(exec8, OpExec|OpFiles|OpLifecycle, 0, "")
	if _, err := Verify(forged, keys, time.Now()); !errors.Is(err, ErrBadSignature) {
		t.Errorf("forged token: %v, want bad signature", err)
	}
	unknown, _ := testSigner(t, "k2")
	tok2, _ := unknown.Mint(exec8, OpExec, 0, "")
	if _, err := Verify(tok2, keys, time.Now()); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unknown key: %v", err)
	}
}

func TestOverlongLifetimeIsRefused(t *testing.T) {
	s, keys := testSigner(t, "k1")
	now := time.Now().Truncate(time.Second)
	c := Capability{KeyID: "k1", Identity: exec8, Ops: OpExec, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}
	msg, _ := encode(&c)
	tok := append(msg, ed25519.Sign(s.key, msg)...)
	if _, err := Verify(tok, keys, now); !errors.Is(err, ErrMalformed) {
		t.Errorf("a one-hour capability: %v, want malformed", err)
	}
}

func TestMintRefusesNonsense(t *testing.T) {
	s, _ := testSigner(t, "k1")
	for _, tc := range []struct {
		ops   Op
		port  uint16
		proto string
	}{
		{0, 0, ""},
		{Op(1 << 10), 0, ""},
		{OpServicePort, 0, ""},
		{OpExec, 8080, "http"},
		{OpServicePort, 8080, ""},
	} {
		if _, err := s.Mint(exec8, tc.ops, tc.port, tc.proto); err == nil {
			t.Errorf("Mint(%#x, %d, %q) accepted", uint32(tc.ops), tc.port, tc.proto)
		}
	}
}

func TestCompare(t *testing.T) {
	c := &Capability{Identity: exec8, Ops: OpExec | OpServicePort, Port: 8080, Protocol: "http"}
	with := func(f func(*Identity)) Identity { id := exec8; f(&id); return id }
	tests := []struct {
		name      string
		installed Identity
		req       Request
		want      Decision
	}{
		{"same execution", exec8, Request{Op: OpExec}, Allow},
		{"service port", exec8, Request{Op: OpServicePort, Port: 8080, Protocol: "http"}, Allow},
		{"other sandbox", with(func(i *Identity) { i.Sandbox = "sb2" }), Request{Op: OpExec}, Deny},
		{"operation not allowed", exec8, Request{Op: OpFiles}, Deny},
		{"no operation", exec8, Request{}, Deny},
		{"other port", exec8, Request{Op: OpServicePort, Port: 22, Protocol: "http"}, Deny},
		{"other protocol", exec8, Request{Op: OpServicePort, Port: 8080, Protocol: "tcp"}, Deny},
		{"receiver installed generation 9", with(func(i *Identity) { i.Generation = 9 }), Request{Op: OpExec}, RefreshRoute},
		{"receiver still on generation 7", with(func(i *Identity) { i.Generation = 7 }), Request{Op: OpExec}, RefreshRoute},
		{"other node", with(func(i *Identity) { i.Node = "node-b" }), Request{Op: OpExec}, RefreshRoute},
		{"other substrate", with(func(i *Identity) { i.Substrate = "ns" }), Request{Op: OpExec}, RefreshRoute},
		{"other activation", with(func(i *Identity) { i.Activation = "a-2" }), Request{Op: OpExec}, RefreshRoute},
		{"other pod", with(func(i *Identity) { i.PodUID = "p" }), Request{Op: OpExec}, RefreshRoute},
		{"bad purpose beats route", with(func(i *Identity) { i.Generation = 9 }), Request{Op: OpLifecycle}, Deny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := Compare(c, tt.installed, tt.req)
			if got != tt.want {
				t.Fatalf("Compare = %s (%s), want %s", got, why, tt.want)
			}
			if got != Allow && why == "" {
				t.Error("refusal without a reason")
			}
		})
	}
}

// FuzzVerify feeds Verify hostile tokens. The fuzzer's bytes are used twice:
// as a whole token (a forgery: it must never verify), and as a message the
// test key signs, so that accepted tokens exist and the differential
// properties run on every input decode accepts: the accepted token
// re-encodes to exactly the received bytes, and decode∘encode is the
// identity (catalogue E-7).
func FuzzVerify(f *testing.F) {
	s, keys := testSigner(f, "k1")
	now := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return now }
	tok, _ := s.Mint(exec8, OpExec, 0, "")
	sp, _ := s.Mint(exec8, OpServicePort, 8080, "http")
	msg := tok[:len(tok)-ed25519.SignatureSize]
	f.Add(tok)
	f.Add(msg)
	f.Add(sp[:len(sp)-ed25519.SignatureSize])
	f.Add([]byte{Version})
	f.Add(bytes.Repeat([]byte{0xff}, 100))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := Verify(b, keys, now); err == nil && !bytes.Equal(b, tok) {
			t.Fatalf("unsigned bytes %x verified", b)
		}
		c, err := decode(b)
		if err != nil {
			return
		}
		again, err := encode(c)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("decode accepted %x but it re-encodes to %x (%v)", b, again, err)
		}
		if c2, err := decode(again); err != nil || !equalCapability(c, c2) {
			t.Fatalf("decode(encode(c)) = %+v, %v; want %+v", c2, err, c)
		}
		signed := append(bytes.Clone(b), ed25519.Sign(s.key, b)...)
		v, err := Verify(signed, keys, c.IssuedAt)
		if err != nil {
			if c.KeyID == "k1" && c.ExpiresAt.After(c.IssuedAt) && c.ExpiresAt.Sub(c.IssuedAt) <= Lifetime {
				t.Fatalf("a well-formed signed token was refused: %v", err)
			}
			return
		}
		msg, _ := encode(v)
		if !bytes.Equal(append(msg, signed[len(b):]...), signed) {
			t.Fatalf("verified token does not re-encode to the received bytes")
		}
	})
}

func equalCapability(a, b *Capability) bool {
	return a.KeyID == b.KeyID && a.Identity == b.Identity && a.Ops == b.Ops && a.Port == b.Port &&
		a.Protocol == b.Protocol && a.IssuedAt.Equal(b.IssuedAt) && a.ExpiresAt.Equal(b.ExpiresAt)
}

func BenchmarkMint(b *testing.B) {
	s, _ := testSigner(b, "k1")
	for b.Loop() {
		if _, err := s.Mint(exec8, OpExec|OpFiles, 0, ""); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyAndCompare(b *testing.B) {
	s, keys := testSigner(b, "k1")
	tok, _ := s.Mint(exec8, OpExec|OpFiles, 0, "")
	now := time.Now()
	for b.Loop() {
		c, err := Verify(tok, keys, now)
		if err != nil {
			b.Fatal(err)
		}
		if d, _ := Compare(c, exec8, Request{Op: OpExec}); d != Allow {
			b.Fatal(d)
		}
	}
}

func TestSignerFileAndKeySetJSON(t *testing.T) {
	path := t.TempDir() + "/signing.key"
	s1, err := LoadOrCreateSigner(path)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := LoadOrCreateSigner(path)
	if err != nil || s2.KeyID() != s1.KeyID() {
		t.Fatalf("reloaded signer %v, %v; want the same key", s2, err)
	}
	ks := KeySetFor(3, s1)
	b, err := ks.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back KeySet
	if err := back.UnmarshalJSON(b); err != nil || back.Version != 3 || !bytes.Equal(back.Keys[s1.KeyID()], s1.PublicKey()) {
		t.Fatalf("key set round trip: %+v, %v", back, err)
	}
	tok, _ := s1.Mint(exec8, OpExec, 0, "")
	if _, err := Verify(tok, &back, time.Now()); err != nil {
		t.Errorf("verify with the decoded key set: %v", err)
	}
	for _, bad := range []string{`{"keys":{"k":"zz"}}`, `{"keys":{"":"00"}}`, `[]`} {
		if err := new(KeySet).UnmarshalJSON([]byte(bad)); err == nil {
			t.Errorf("key set %s accepted", bad)
		}
	}
}

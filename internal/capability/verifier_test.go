package capability

import (
	"crypto/ed25519"
	"errors"
	"testing"
	"time"
)

// TestVerifierWindowOnEveryCall: a remembered token is still refused once
// it has expired, and before it is valid, as Verify refuses it.
func TestVerifierWindowOnEveryCall(t *testing.T) {
	s, keys := testSigner(t, "k1")
	now := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return now }
	tok, _ := s.Mint(exec8, OpExec, 0, "")
	var v Verifier
	if c, err := v.Verify(tok, keys, now); err != nil || c.Identity != exec8 {
		t.Fatalf("first verify: %+v, %v", c, err)
	}
	if c, err := v.Verify(tok, keys, now.Add(time.Second)); err != nil || c.Identity != exec8 || c.Ops != OpExec {
		t.Fatalf("remembered verify: %+v, %v", c, err)
	}
	if _, err := v.Verify(tok, keys, now.Add(Lifetime+Skew+time.Second)); !errors.Is(err, ErrExpired) {
		t.Errorf("remembered token after its expiry: %v, want %v", err, ErrExpired)
	}
	if _, err := v.Verify(tok, keys, now.Add(-Skew-time.Second)); !errors.Is(err, ErrNotYetValid) {
		t.Errorf("remembered token before its window: %v, want %v", err, ErrNotYetValid)
	}
}

// TestVerifierForgetsWithTheKeys: a token remembered under one key set is
// refused under a set without its key, and under a set that holds another
// key by the same id, even when that set is changed in place.
func TestVerifierForgetsWithTheKeys(t *testing.T) {
	s, keys := testSigner(t, "k1")
	now := time.Now()
	s.now = func() time.Time { return now }
	tok, _ := s.Mint(exec8, OpExec, 0, "")
	var v Verifier
	if _, err := v.Verify(tok, keys, now); err != nil {
		t.Fatal(err)
	}
	other, _ := testSigner(t, "k2")
	rotated := &KeySet{Version: 2, Keys: map[string]ed25519.PublicKey{"k2": other.PublicKey()}}
	if _, err := v.Verify(tok, rotated, now); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("under a key set without k1: %v, want %v", err, ErrUnknownKey)
	}
	if _, err := v.Verify(tok, keys, now); err != nil {
		t.Fatalf("back under the first set: %v", err)
	}
	keys.Keys["k1"] = other.PublicKey() // the same set, k1 now another key
	if _, err := v.Verify(tok, keys, now); !errors.Is(err, ErrBadSignature) {
		t.Errorf("after k1 was replaced in place: %v, want %v", err, ErrBadSignature)
	}
}

// TestVerifierRefusesWhatVerifyRefuses: tampered tokens are verified in full
// (and refused) whatever was remembered, and the memory stays bounded.
func TestVerifierRefusesWhatVerifyRefuses(t *testing.T) {
	s, keys := testSigner(t, "k1")
	now := time.Now()
	s.now = func() time.Time { return now }
	tok, _ := s.Mint(exec8, OpExec, 0, "")
	var v Verifier
	if _, err := v.Verify(tok, keys, now); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), tok...)
	bad[len(bad)-1] ^= 1
	if _, err := v.Verify(bad, keys, now); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a token with a changed signature: %v, want %v", err, ErrBadSignature)
	}
	for i := range VerifierEntries + 10 {
		tok, _ := s.Mint(Identity{Sandbox: "sb", Generation: uint64(i + 1), Node: "n", Substrate: "ns", Activation: "a"}, OpExec, 0, "")
		if _, err := v.Verify(tok, keys, now); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(v.seen); n > VerifierEntries {
		t.Errorf("the verifier remembers %d tokens, more than %d", n, VerifierEntries)
	}
}

// BenchmarkVerifier: a check of a token seen before against a full Verify.
func BenchmarkVerifier(b *testing.B) {
	s, keys := testSigner(b, "k1")
	tok, _ := s.Mint(exec8, OpExec, 0, "")
	now := time.Now()
	b.Run("Verify", func(b *testing.B) {
		for b.Loop() {
			if _, err := Verify(tok, keys, now); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Verifier", func(b *testing.B) {
		var v Verifier
		for b.Loop() {
			if _, err := v.Verify(tok, keys, now); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package apikey

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

func TestRoundTrip(t *testing.T) {
	k := New()
	s := k.String()
	if !strings.HasPrefix(s, Prefix+k.ID+"_") || len(s) != keyLen {
		t.Fatalf("String() = %q (len %d), want %s%s_<64 hex> (len %d)", s, len(s), Prefix, k.ID, keyLen)
	}
	got, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(String()) = %v", err)
	}
	if got.ID != k.ID || got.String() != s {
		t.Fatalf("Parse round trip = %q, want %q", got.String(), s)
	}
	if !got.Matches(k.Hash()) {
		t.Error("parsed key does not match its own hash")
	}
	if k.Display() != Prefix+k.ID || strings.Contains(k.Display(), s[len(s)-64:]) {
		t.Errorf("Display() = %q leaks or misses the id", k.Display())
	}
}

func TestMatchesRejectsOthers(t *testing.T) {
	a, b := New(), New()
	if a.Matches(b.Hash()) || b.Matches(a.Hash()) {
		t.Fatal("a key matched another key's hash")
	}
	// Same secret under another id must not match: the hash binds the id.
	c := a
	c.ID = b.ID
	if c.Matches(a.Hash()) {
		t.Fatal("hash does not bind the key id")
	}
	if a.Matches("") || a.Matches(strings.Repeat("0", 64)) {
		t.Fatal("matched an empty or zero hash")
	}
}

func TestParseRejects(t *testing.T) {
	good := New().String()
	for _, tc := range []struct{ name, in string }{
		{"empty", ""},
		{"prefix only", Prefix},
		{"no prefix", "xxxxx_" + good[len(Prefix):]},
		{"upper hex", good[:len(good)-1] + "A"},
		{"non hex", good[:len(good)-1] + "g"},
		{"short", good[:len(good)-1]},
		{"long", good + "0"},
		{"bad id", Prefix + "k-ABCDEFGHIJKLMNOP" + good[len(Prefix)+18:]},
		{"t id", Prefix + "t-" + good[len(Prefix)+2:]},
		{"missing sep", Prefix + good[len(Prefix):len(Prefix)+18] + "0" + good[len(Prefix)+19:]},
		{"nul", good[:20] + "\x00" + good[21:]},
		{"bearer", "Bearer " + good},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.in)
			if !errors.Is(err, errdefs.ErrUnauthenticated) {
				t.Fatalf("Parse(%q) = %v, want ErrUnauthenticated", tc.in, err)
			}
			if len(tc.in) > 20 && strings.Contains(err.Error(), tc.in[len(tc.in)-20:]) {
				t.Errorf("error %q echoes the input", err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(New().String())
	f.Add("")
	f.Add(Prefix + "k-0123456789abcdef_" + strings.Repeat("0", 64))
	f.Add(Prefix + "k-0123456789abcdef_" + strings.Repeat("Z", 64))
	f.Add(Prefix + "k-0123456789abcde__" + strings.Repeat("0", 64))
	f.Fuzz(func(t *testing.T, s string) {
		k, err := Parse(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrUnauthenticated) {
				t.Fatalf("error %v is not ErrUnauthenticated", err)
			}
			return
		}
		// Accepted keys have exactly one spelling.
		if k.String() != s {
			t.Fatalf("Parse(%q).String() = %q", s, k.String())
		}
		if !k.Matches(k.Hash()) {
			t.Fatal("key does not match its own hash")
		}
	})
}

// TestE2BShape: a key minted in E2B's shape is "e2b_" and 40 lowercase hex
// (what E2B SDKs that check keys accept), parses back to the same id and
// secret, and carries 128 bits of secret beside its 32-bit id.
func TestE2BShape(t *testing.T) {
	shape := regexp.MustCompile(`^e2b_[0-9a-f]{40}$`)
	k := NewE2B()
	s := k.String()
	if !shape.MatchString(s) || !k.E2B() {
		t.Fatalf("NewE2B().String() = %q, want e2b_ and 40 lowercase hex", s)
	}
	if k.ID != "k-"+E2BIDMark+s[4:12] || !sandbox.ValidKeyID(k.ID) {
		t.Errorf("id %q: want k-%s and the key's first 8 hex digits, a valid key id", k.ID, E2BIDMark)
	}
	got, err := Parse(s)
	if err != nil || got.ID != k.ID || got.String() != s || !got.E2B() || !got.Matches(k.Hash()) {
		t.Fatalf("Parse(%q) = %+v, %v; want the same key, matching its hash", s, got, err)
	}
	if d := k.Display(); d != "e2b_"+s[4:12]+"…" || strings.Contains(d, s[12:]) {
		t.Errorf("Display() = %q leaks or misses the id", d)
	}
	if IDOf(k.Display()) != k.ID || IDOf(s[:12]) != k.ID || IDOf(k.ID) != k.ID || IDOf(Prefix+"k-abc") != "k-abc" {
		t.Errorf("IDOf does not read back the id of %q", k.Display())
	}
	// 128 bits of secret: distinct keys, and the secret is what follows the id.
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		s := NewE2B().String()[12:]
		if len(s) != 32 || seen[s] {
			t.Fatalf("secret %q repeated or not 32 hex", s)
		}
		seen[s] = true
	}
}

// TestE2BMatchesNeedsTheSecret: an E2B-shaped key matches only its own
// hash: a change of any secret digit, another id, or a SPACE key's hash of
// the same id and secret bytes is refused.
func TestE2BMatchesNeedsTheSecret(t *testing.T) {
	k := NewE2B()
	s, stored := k.String(), k.Hash()
	for i := 12; i < len(s); i++ {
		b := []byte(s)
		b[i] = "0123456789abcdef"[(strings.IndexByte("0123456789abcdef", b[i])+1)%16]
		other, err := Parse(string(b))
		if err != nil {
			t.Fatal(err)
		}
		if other.ID != k.ID {
			t.Fatalf("digit %d of the secret changed the id", i)
		}
		if other.Matches(stored) {
			t.Fatalf("a key differing in secret digit %d matched", i)
		}
	}
	space := Key{ID: k.ID, secret: k.secret}
	if space.Matches(stored) {
		t.Error("a SPACE key with the same id and secret bytes matched an E2B key's hash")
	}
	if NewE2B().Matches(stored) {
		t.Error("another E2B key matched")
	}
}

func TestE2BParseRejects(t *testing.T) {
	good := NewE2B().String()
	for name, in := range map[string]string{
		"short":      good[:len(good)-1],
		"long":       good + "0",
		"upper hex":  good[:len(good)-1] + "A",
		"non hex":    good[:len(good)-1] + "g",
		"prefix":     "e2b_",
		"old e2b":    "e2b_53ae1fed82754c17ad8077fbc8bcdd90",
		"E2B prefix": "E2B_" + good[4:],
	} {
		if _, err := Parse(in); !errors.Is(err, errdefs.ErrUnauthenticated) || len(in) > 4 && strings.Contains(err.Error(), in[4:]) {
			t.Errorf("%s: Parse(%q) = %v, want an Unauthenticated error not echoing it", name, in, err)
		}
	}
}

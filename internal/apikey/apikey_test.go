package apikey

import (
	"errors"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
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

package sandbox

import "testing"

func TestDerivedID(t *testing.T) {
	a := DerivedID("create", "t-aaaa", "key-1")
	if !ValidID(a) {
		t.Fatalf("DerivedID = %q: not a valid sandbox id", a)
	}
	if again := DerivedID("create", "t-aaaa", "key-1"); again != a {
		t.Errorf("DerivedID is not stable: %q then %q", a, again)
	}
	for _, other := range [][]string{
		{"create", "t-bbbb", "key-1"}, // another tenant
		{"create", "t-aaaa", "key-2"}, // another key
		{"fork", "t-aaaa", "key-1"},   // another operation
		{"create", "t-aaaak", "ey-1"}, // the same bytes split differently
		{"create", "t-aaaa", "key-1", ""},
	} {
		if b := DerivedID(other...); b == a || !ValidID(b) {
			t.Errorf("DerivedID(%q) = %q (same as %q, or invalid)", other, b, a)
		}
	}
}

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

// TestIDEntropy (catalogue G-3): new sandbox and snapshot ids carry at
// least 122 random bits (24 characters of 36: 124 bits); the shorter ids
// made before stay valid, and no other length is.
func TestIDEntropy(t *testing.T) {
	bits := func(chars int) float64 { return float64(chars) * 5.1699 } // log2(36)
	if id := NewID(); len(id) != 24 || bits(len(id)) < 122 || !ValidID(id) {
		t.Errorf("NewID() = %q: %d characters, %.0f bits; want 24 and at least 122", id, len(id), bits(len(id)))
	}
	if id := DerivedID("create", "t-a", "k"); len(id) != 24 || !ValidID(id) {
		t.Errorf("DerivedID = %q, want 24 characters", id)
	}
	if id := NewSnapshotID(); len(id) != len("sn-")+24 || !ValidSnapshotID(id) {
		t.Errorf("NewSnapshotID() = %q, want sn- and 24 characters", id)
	}
	if !ValidID("abcdefghij0123456789") {
		t.Error("a sandbox id of 20 characters, made before ids grew, is refused")
	}
	for _, n := range []int{19, 21, 23, 25} {
		if id := randomString(n); ValidID(id) {
			t.Errorf("ValidID accepts %d characters: %q", n, id)
		}
	}
}

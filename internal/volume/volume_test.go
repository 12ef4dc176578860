package volume

import (
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	for _, ok := range []string{"base", "minimal", "e-1", "a.b_c", "0", strings.Repeat("a", 128)} {
		if err := ValidName(ok); err != nil {
			t.Errorf("ValidName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", ".x", "-x", "_x", "a/b", "A", "a b", "a\x00", strings.Repeat("a", 129)} {
		if err := ValidName(bad); err == nil {
			t.Errorf("ValidName(%q) = nil, want an error", bad)
		}
	}
}

func FuzzValidName(f *testing.F) {
	f.Add("base")
	f.Add("../etc")
	f.Fuzz(func(t *testing.T, s string) {
		if ValidName(s) == nil && (strings.ContainsAny(s, "/\x00") || s == "." || s == ".." || strings.HasPrefix(s, ".")) {
			t.Fatalf("ValidName accepted %q", s)
		}
	})
}

package guesttext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "exit status 3: db not up", "exit status 3: db not up"},
		{"newline and tab", "a\nb\tc", `a\nb\tc`},
		{"terminal escape", "\x1b[31mred\x07", `\x1b[31mred\x07`},
		{"invalid UTF-8", "ok\xff\xfe", `ok\xff\xfe`},
		{"bidi override and C1", "x\u202ey\u0085", `x\u{202e}y\u{85}`},
		{"line separator", "a\u2028b", `a\u{2028}b`},
		{"unicode kept", "café ✓", "café ✓"},
		{"backslash kept", `a\nb`, `a\nb`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Escape(tc.in); got != tc.want {
				t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		for _, in := range []string{strings.Repeat("é", 10<<10), strings.Repeat("\x1b", 10<<10), strings.Repeat("a", MaxBytes+1)} {
			got := Escape(in)
			if len(got) > MaxBytes || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
				t.Errorf("Escape(%d bytes) = %d bytes (valid %v), want at most %d, valid, ending in …", len(in), len(got), utf8.ValidString(got), MaxBytes)
			}
		}
		if in := strings.Repeat("a", MaxBytes); Escape(in) != in {
			t.Errorf("text of exactly MaxBytes bytes was changed")
		}
	})
}

// FuzzEscape: the result is valid UTF-8, printable, bounded, and the
// same when escaped again (each host on the way applies it).
func FuzzEscape(f *testing.F) {
	f.Add("exit status 3\n\x1b[2J\xff\u202e")
	f.Add(strings.Repeat("é", 1100))
	f.Fuzz(func(t *testing.T, in string) {
		got := Escape(in)
		if len(got) > MaxBytes || !utf8.ValidString(got) {
			t.Fatalf("Escape(%q) = %q: %d bytes, valid %v", in, got, len(got), utf8.ValidString(got))
		}
		if strings.ContainsFunc(got, func(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }) {
			t.Fatalf("Escape(%q) = %q has a control character", in, got)
		}
		if again := Escape(got); again != got {
			t.Fatalf("not idempotent: %q then %q", got, again)
		}
	})
}

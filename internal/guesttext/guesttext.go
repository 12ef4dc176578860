// Package guesttext makes text a guest wrote safe for a host to show. It
// stands on the standard library alone: the host bridge links it.
package guesttext

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxBytes bounds guest-controlled text a host shows users (a sandbox
// event's message), after escaping.
const MaxBytes = 2048

// Escape makes text a guest wrote safe to show: invalid UTF-8 bytes
// become \xNN, control and format characters (terminal escapes, newlines,
// bidirectional overrides, line separators) become \n, \t, \xNN or \u{N},
// and a result longer than MaxBytes bytes is cut on a character
// boundary, "…" marking the cut.
//
// Every byte from a guest is hostile, and the text crosses several hosts'
// processes (bridge, node, server): each applies Escape where the text
// comes in. That is why it is idempotent: a backslash is left as it is (an
// escape reads the same as the guest writing one, which harms nobody), and
// a result is never longer than the bound.
func Escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() <= MaxBytes; {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < utf8.RuneSelf && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r):
			fmt.Fprintf(&b, `\u{%x}`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	out := b.String()
	if len(out) <= MaxBytes {
		return out
	}
	const cut = "…"
	end := MaxBytes - len(cut)
	for end > 0 && !utf8.RuneStart(out[end]) {
		end--
	}
	return out[:end] + cut
}

package intercept

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/spacesandbox/space/internal/credentials"
)

// secretForms returns the byte strings a response could carry secret in:
// the secret itself, its standard and URL-safe base64 at each of the three
// alignments, and each of those as percent-encoding and JSON string
// escaping would write it (see the package doc). Forms are distinct and
// none is empty.
func secretForms(secret []byte) [][]byte {
	bases := [][]byte{secret}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for align := range 3 {
			if core := base64Core(enc, secret, align); len(core) > 0 {
				bases = append(bases, core)
			}
		}
	}
	seen := map[string]bool{}
	var out [][]byte
	add := func(b []byte) {
		if len(b) > 0 && !seen[string(b)] {
			seen[string(b)] = true
			out = append(out, b)
		}
	}
	for _, b := range bases {
		add(b)
		for _, esc := range percentForms(b) {
			add(esc)
		}
		for _, esc := range jsonForms(b) {
			add(esc)
		}
	}
	return out
}

// base64Core returns the base64 characters of secret that do not depend
// on its neighbours when it is encoded after align (0, 1 or 2) other bytes
// of a longer string: characters whose 6 bits all come from the secret.
// Padding and the partial characters at either end are left out, so the
// core is found whether the encoding is padded or not, and inside a longer
// base64 string. The one or two partial characters left around a redacted
// core carry at most 4 bits of the secret each.
func base64Core(enc *base64.Encoding, secret []byte, align int) []byte {
	src := make([]byte, align+len(secret))
	copy(src[align:], secret)
	full := enc.EncodeToString(src)
	startBit, endBit := 8*align, 8*(align+len(secret))
	first := (startBit + 5) / 6 // the first character starting at or after startBit
	last := endBit / 6          // one past the last character ending at or before endBit
	if last <= first {
		return nil
	}
	return []byte(full[first:last])
}

// percentForms returns b percent-encoded the ways URL encoders write it:
// as a query component (space as '+'), as a path segment, and with every
// byte but the unreserved ones escaped; each with upper- and lower-case
// hex.
func percentForms(b []byte) [][]byte {
	s := string(b)
	var out [][]byte
	for _, e := range []string{url.QueryEscape(s), url.PathEscape(s), escapeAll(s)} {
		if e == s {
			continue
		}
		out = append(out, []byte(e), lowerHex(e, '%', 2))
	}
	return out
}

// escapeAll percent-encodes every byte that is not an RFC 3986 unreserved
// character (what JavaScript's encodeURIComponent does, and more).
func escapeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// lowerHex lower-cases the n hex digits after every intro byte of s.
func lowerHex(s string, intro byte, n int) []byte {
	out := []byte(s)
	for i := 0; i < len(out); i++ {
		if out[i] != intro {
			continue
		}
		for j := i + 1; j < len(out) && j <= i+n; j++ {
			if 'A' <= out[j] && out[j] <= 'F' {
				out[j] += 'a' - 'A'
			}
		}
	}
	return out
}

// JSON escaping options: which optional escapes an encoder applies.
const (
	jsonSlash    = 1 << iota // "/" as "\/" (PHP, some Java)
	jsonHTML                 // "<", ">", "&" as \u003c... (Go, .NET)
	jsonNonASCII             // every non-ASCII rune as \uXXXX (Python's ensure_ascii)
	jsonUpperHex             // \u00XX with upper-case hex
	jsonAllASCII             // every ASCII punctuation byte as \u00XX
	jsonOptions  = 1 << 5
)

// jsonForms returns b as the body of a JSON string under every
// combination of the escapes JSON encoders choose between; forms equal to
// b are left out.
func jsonForms(b []byte) [][]byte {
	var out [][]byte
	for opt := range jsonOptions {
		if e := jsonEscape(b, opt); !bytes.Equal(e, b) {
			out = append(out, e)
		}
	}
	return out
}

func jsonEscape(b []byte, opt int) []byte {
	var out bytes.Buffer
	hex := "0123456789abcdef"
	if opt&jsonUpperHex != 0 {
		hex = "0123456789ABCDEF"
	}
	u := func(r rune) {
		if r > 0xffff {
			r -= 0x10000
			hi, lo := 0xd800+(r>>10)&0x3ff, 0xdc00+r&0x3ff
			for _, v := range []rune{hi, lo} {
				out.WriteString(`\u`)
				out.Write([]byte{hex[v>>12&0xf], hex[v>>8&0xf], hex[v>>4&0xf], hex[v&0xf]})
			}
			return
		}
		out.WriteString(`\u`)
		out.Write([]byte{hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf]})
	}
	for i := 0; i < len(b); {
		c := b[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRune(b[i:])
			switch {
			case r == utf8.RuneError && n == 1:
				u(0xfffd) // what encoders make of a byte that is not UTF-8
			case opt&jsonNonASCII != 0 || (r == '\u2028' || r == '\u2029') && opt&jsonHTML != 0:
				u(r)
			default:
				out.Write(b[i : i+n])
			}
			i += n
			continue
		}
		i++
		switch {
		case c == '"':
			out.WriteString(`\"`)
		case c == '\\':
			out.WriteString(`\\`)
		case c == '\t':
			out.WriteString(`\t`)
		case c == '\n':
			out.WriteString(`\n`)
		case c == '\r':
			out.WriteString(`\r`)
		case c < 0x20 || c == 0x7f && opt&jsonAllASCII != 0:
			u(rune(c))
		case c == '/' && opt&jsonSlash != 0:
			out.WriteString(`\/`)
		case (c == '<' || c == '>' || c == '&') && opt&jsonHTML != 0:
			u(rune(c))
		case opt&jsonAllASCII != 0 && !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'):
			u(rune(c))
		default:
			out.WriteByte(c)
		}
	}
	return out.Bytes()
}

// injectedSecrets returns the byte strings to redact for a credential:
// its secret, and for basic injection also the password alone when it is
// long enough to be told apart from ordinary text (credentials.MinSecretLen).
// The results are copies.
func injectedSecrets(cred *credentials.Credential) [][]byte {
	if cred.Injection.Method == credentials.MethodHeaders {
		// Each value on its own: a response echoes headers one by one.
		if _, values, err := cred.InjectedHeaders(); err == nil {
			out := make([][]byte, 0, len(values))
			for _, v := range values {
				out = append(out, bytes.Clone(v))
			}
			return out
		}
	}
	out := [][]byte{bytes.Clone(cred.Secret)}
	if cred.Injection.Method == credentials.MethodBasic {
		if _, pw, ok := bytes.Cut(cred.Secret, []byte(":")); ok && len(pw) >= credentials.MinSecretLen {
			out = append(out, bytes.Clone(pw))
		}
	}
	return out
}

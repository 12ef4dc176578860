package intercept

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
)

// A secret with bytes every encoder treats differently: punctuation that
// base64's two alphabets, percent-encoding and JSON escape, and non-ASCII.
const oddSecret = `sk-Te/st+k3y"<&>é?x=1 y\~~>>?`

// encodings are the ways a response could carry a secret, each as the
// text an upstream would write.
var encodings = map[string]func(s string) string{
	"raw":                 func(s string) string { return s },
	"base64 padded":       func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
	"base64 raw":          func(s string) string { return base64.RawStdEncoding.EncodeToString([]byte(s)) },
	"base64 at offset 1":  func(s string) string { return base64.StdEncoding.EncodeToString([]byte("x" + s + "tail")) },
	"base64 at offset 2":  func(s string) string { return base64.StdEncoding.EncodeToString([]byte("xy" + s + "t")) },
	"base64url":           func(s string) string { return base64.URLEncoding.EncodeToString([]byte(s)) },
	"base64url offset 1":  func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte("x" + s)) },
	"base64url offset 2":  func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte("xy" + s)) },
	"query escape":        url.QueryEscape,
	"query escape lower":  func(s string) string { return string(lowerHex(url.QueryEscape(s), '%', 2)) },
	"path escape":         url.PathEscape,
	"escape every byte":   escapeAll,
	"escape every, lower": func(s string) string { return string(lowerHex(escapeAll(s), '%', 2)) },
	"json (Go)":           func(s string) string { b, _ := json.Marshal(s); return string(b) },
	"json, slash escaped": func(s string) string { return string(jsonEscape([]byte(s), jsonSlash)) },
	"json ensure_ascii":   func(s string) string { return string(jsonEscape([]byte(s), jsonNonASCII|jsonUpperHex)) },
	"json every \\u00XX":  func(s string) string { return string(jsonEscape([]byte(s), jsonAllASCII)) },
	"json of base64": func(s string) string {
		b, _ := json.Marshal(base64.StdEncoding.EncodeToString([]byte(s)))
		return string(b)
	},
	"json of base64, \\/": func(s string) string {
		return string(jsonEscape([]byte(base64.StdEncoding.EncodeToString([]byte(s))), jsonSlash))
	},
	"query of base64": func(s string) string { return url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(s))) },
	"basic header":    func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+s)) },
}

func mustRedactor(t testing.TB, secrets ...string) *redactor {
	t.Helper()
	var in []injected
	for i, s := range secrets {
		in = append(in, injected{credID: fmt.Sprintf("c%d", i), secret: []byte(s)})
	}
	r, err := newRedactor(in)
	if err != nil {
		t.Fatalf("newRedactor: %v", err)
	}
	return r
}

// leaks reports whether text still holds secret in a form that decodes
// back to it: the encoded text itself, or a base64 or percent decoding of
// any stretch of it containing the secret.
func leaks(text, encoded, secret string) bool {
	if strings.Contains(text, encoded) || strings.Contains(text, secret) {
		return true
	}
	if u, err := url.QueryUnescape(text); err == nil && strings.Contains(u, secret) {
		return true
	}
	var js string
	if json.Unmarshal([]byte(text), &js) == nil && strings.Contains(js, secret) {
		return true
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		for i := 0; i < len(text); i++ {
			for j := len(text); j > i; j-- {
				if d, err := enc.DecodeString(text[i:j]); err == nil && strings.Contains(string(d), secret) {
					return true
				}
			}
		}
	}
	return false
}

func TestRedactEveryEncoding(t *testing.T) {
	for _, secret := range []string{oddSecret, "plainalnumsecret0042", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"} {
		r := mustRedactor(t, secret, "alice:"+secret)
		for name, enc := range encodings {
			t.Run(name, func(t *testing.T) {
				encoded := enc(secret)
				in := `{"echo": ` + encoded + `, "n": 1}`
				counts := make(tally, len(r.creds))
				got := r.redactString(in, counts)
				if len(got) != len(in) {
					t.Errorf("redaction changed the length: %d, was %d", len(got), len(in))
				}
				if leaks(got, encoded, secret) {
					t.Errorf("secret %q encoded as %q survives redaction:\n in %q\nout %q", secret, encoded, in, got)
				}
				if counts.total() == 0 {
					t.Errorf("no redaction counted in %q", got)
				}
				if !strings.HasPrefix(got, `{"echo": `) || !strings.HasSuffix(got, `, "n": 1}`) {
					t.Errorf("text around the secret changed: %q", got)
				}
			})
		}
	}
}

// referenceRedact overwrites every byte of every occurrence of every
// pattern with marker, the slow obvious way.
func referenceRedact(data []byte, patterns [][]byte, marker byte) []byte {
	out := bytes.Clone(data)
	for _, p := range patterns {
		for i := 0; ; i++ {
			j := bytes.Index(data[i:], p)
			if j < 0 {
				break
			}
			i += j
			for k := i; k < i+len(p); k++ {
				out[k] = marker
			}
		}
	}
	return out
}

func allForms(secrets ...string) [][]byte {
	var out [][]byte
	for _, s := range secrets {
		out = append(out, secretForms([]byte(s))...)
	}
	return out
}

// chunkReader returns data in reads of the given sizes (the last size
// repeating), as TCP segments or chunks would deliver it.
type chunkReader struct {
	data  []byte
	sizes []int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.sizes) > 0 {
		n = max(1, c.sizes[0])
		if len(c.sizes) > 1 {
			c.sizes = c.sizes[1:]
		}
	}
	n = min(n, len(c.data), len(p))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func (c *chunkReader) Close() error { return nil }

func streamRedact(t testing.TB, r *redactor, data []byte, sizes []int) ([]byte, tally) {
	t.Helper()
	var got tally
	b := r.body(&chunkReader{data: data, sizes: sizes}, func(c tally) error { got = c; return nil })
	out, err := io.ReadAll(b)
	if err != nil {
		t.Fatalf("read redacted stream: %v", err)
	}
	if c := cap(b.buf); c > redactChunk+r.m.maxLen {
		t.Fatalf("stream buffer grew to %d bytes, want at most %d", c, redactChunk+r.m.maxLen)
	}
	return out, got
}

func TestRedactSplitAtEveryOffset(t *testing.T) {
	secrets := []string{oddSecret, "second-secret-XYZ0"}
	r := mustRedactor(t, secrets...)
	forms := allForms(secrets...)
	for name, enc := range encodings {
		data := []byte("HTTP body before " + enc(secrets[0]) + " and " + enc(secrets[1]) + " after")
		want := referenceRedact(data, forms, r.marker)
		for cut := 0; cut <= len(data); cut++ {
			got, counts := streamRedact(t, r, data, []int{cut, len(data)})
			if !bytes.Equal(got, want) {
				t.Fatalf("%s, split at %d:\n got %q\nwant %q", name, cut, got, want)
			}
			if counts.total() < 2 {
				t.Fatalf("%s, split at %d: %d redactions counted, want at least 2", name, cut, counts.total())
			}
		}
		// And one byte per read.
		if got, _ := streamRedact(t, r, data, []int{1}); !bytes.Equal(got, want) {
			t.Fatalf("%s, one byte per read:\n got %q\nwant %q", name, got, want)
		}
	}
}

func TestRedactOverlappingAndPrefixSecrets(t *testing.T) {
	// One secret is a prefix of another, a third overlaps both.
	secrets := []string{"abcdefgh12", "abcdefgh1234", "h1234-tail-5"}
	r := mustRedactor(t, secrets...)
	forms := allForms(secrets...)
	for _, in := range []string{
		"xx abcdefgh12 yy",
		"xx abcdefgh1234 yy",
		"xx abcdefgh1234-tail-5 yy",
		"abcdefgh12abcdefgh12",
		"abcdefgabcdefgh1",   // no whole secret
		"aabcdefgh123abcdef", // the short one, then an unfinished long one
	} {
		want := referenceRedact([]byte(in), forms, r.marker)
		for cut := 0; cut <= len(in); cut++ {
			got, _ := streamRedact(t, r, []byte(in), []int{cut, len(in)})
			if !bytes.Equal(got, want) {
				t.Errorf("%q split at %d: got %q, want %q", in, cut, got, want)
			}
		}
		for _, f := range forms {
			if bytes.Contains(want, f) {
				t.Errorf("%q: reference output %q still has %q", in, want, f)
			}
		}
	}
	// A longer occurrence that ends after a shorter one but starts before
	// it (found by FuzzRedactingBody): the whole of both is overwritten.
	r2 := mustRedactor(t, "3000000000", "00000000")
	in := []byte("x3000000000y")
	want := referenceRedact(in, allForms("3000000000", "00000000"), r2.marker)
	for cut := 0; cut <= len(in); cut++ {
		if got, _ := streamRedact(t, r2, in, []int{cut, 1}); !bytes.Equal(got, want) {
			t.Errorf("%q split at %d: got %q, want %q", in, cut, got, want)
		}
	}
	counts := make(tally, len(r.creds))
	r.redactString("abcdefgh1234-tail-5", counts)
	if counts.total() != 1 {
		t.Errorf("overlapping occurrences counted %v times, want once", counts)
	}
}

func TestRedactorRefusesShortSecrets(t *testing.T) {
	for _, s := range []string{"", "x", "1234567"} {
		_, err := newRedactor([]injected{{credID: "c1", secret: []byte(s)}})
		if !errdefs.IsFailedPrecondition(err) {
			t.Errorf("newRedactor(%q) = %v, want ErrFailedPrecondition", s, err)
		}
	}
	c := credentials.Credential{
		ID: "c1", Scope: credentials.Scope{Tenant: "t1"}, Name: "n", Secret: []byte("short"),
		Injection: credentials.Injection{Method: credentials.MethodHeader, Name: "X-Api-Key"}, AllowedHosts: []string{"a.example"},
	}
	if err := c.Validate(); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Validate of a 5-byte secret = %v, want ErrInvalidArgument", err)
	}
}

func TestRedactorMarkerAvoidsSecrets(t *testing.T) {
	// A secret made of the first marker candidates: the marker must be
	// another byte, or the output would hold the secret.
	secret := "****####~~~~"
	r := mustRedactor(t, secret)
	if strings.IndexByte(secret, r.marker) >= 0 {
		t.Fatalf("marker %q occurs in the secret", r.marker)
	}
	if got := r.redactString("a"+secret+"*#~", make(tally, 1)); strings.Contains(got, secret) {
		t.Errorf("redacted %q still holds the secret", got)
	}
	if _, err := newRedactor([]injected{{credID: "c", secret: []byte(markerCandidates)}}); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("a secret using every marker byte: %v, want ErrFailedPrecondition", err)
	}
}

func TestRedactorSparseMatchesDense(t *testing.T) {
	// A secret large enough that the automaton is too big for a dense
	// table must give the same answers.
	big := strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyzABCDEF-_", 300)
	r := mustRedactor(t, big)
	if r.m.dense != nil {
		t.Fatalf("automaton of %d states is dense; the test wants the sparse one", len(r.m.depth))
	}
	data := []byte("pre " + big[:100] + " " + base64.StdEncoding.EncodeToString([]byte(big)) + " " + big + " post")
	want := referenceRedact(data, secretForms([]byte(big)), r.marker)
	if got, _ := streamRedact(t, r, data, []int{7, 4096}); !bytes.Equal(got, want) {
		t.Errorf("sparse automaton output differs from the reference")
	}
}

func TestRedactingBodyHoldsBackOnError(t *testing.T) {
	// A stream that fails after the first half of a secret must not
	// release that half.
	secret := "held-back-secret-99"
	r := mustRedactor(t, secret)
	src := io.MultiReader(strings.NewReader("ok "+secret[:10]), &failingReader{})
	out, err := io.ReadAll(r.body(io.NopCloser(src), nil))
	if err == nil {
		t.Fatal("read error was not passed on")
	}
	if strings.Contains(string(out), secret[:10]) {
		t.Errorf("released %q before knowing whether it was a secret", out)
	}
	// And an audit failure at the end keeps the rest back too.
	out, err = io.ReadAll(r.body(io.NopCloser(strings.NewReader("ok "+secret[:10])), func(tally) error { return errdefs.ErrUnavailable }))
	if !errdefs.IsUnavailable(err) || strings.Contains(string(out), secret[:10]) {
		t.Errorf("with a failing audit: %q, %v", out, err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// FuzzRedactingBody streams arbitrary bytes, cut into arbitrary reads,
// through the redactor of two arbitrary secrets. The output has the
// input's length, equals the input with every occurrence of every form
// overwritten (the reference), holds no form, and the stream's buffer
// stays within one read plus the longest form.
func FuzzRedactingBody(f *testing.F) {
	f.Add("sk-live-secret-0042", "alice:password-77", []byte("echo sk-live-secret-0042 and c2stbGl2ZS1zZWNyZXQtMDA0Mg=="), []byte{3, 1, 7})
	f.Add(oddSecret, "abcdefgh12", []byte(`{"h":"sk-Te\/st+k3y\"\u003c\u0026\u003e\u00e9?x=1 y\\~~\u003e\u003e?"}`), []byte{1})
	f.Add("abcdefgh12", "abcdefgh1234", []byte("abcdefgh1234abcdefgh12abcdefgh1"), []byte{5, 2})
	f.Add("%%%%%%%%", "++++////", []byte("%25%25%25%25%25%25%25%25 KysrKy8vLy8="), []byte{0})
	f.Fuzz(func(t *testing.T, a, b string, data []byte, cuts []byte) {
		if len(a) > 256 || len(b) > 256 || len(data) > 1<<16 {
			return
		}
		r, err := newRedactor([]injected{{credID: "a", secret: []byte(a)}, {credID: "b", secret: []byte(b)}})
		if err != nil {
			if len(a) >= credentials.MinSecretLen && len(b) >= credentials.MinSecretLen && !errdefs.IsFailedPrecondition(err) {
				t.Fatalf("newRedactor: %v", err)
			}
			return
		}
		sizes := make([]int, 0, len(cuts))
		for _, c := range cuts {
			sizes = append(sizes, int(c))
		}
		forms := allForms(a, b)
		got, _ := streamRedact(t, r, data, sizes)
		want := referenceRedact(data, forms, r.marker)
		if !bytes.Equal(got, want) {
			t.Fatalf("stream output differs from the reference:\n got %q\nwant %q", got, want)
		}
		for _, f := range forms {
			if bytes.Contains(got, f) {
				t.Fatalf("output %q still holds form %q", got, f)
			}
		}
		if s := r.redactString(string(data), make(tally, len(r.creds))); s != string(want) {
			t.Fatalf("redactString differs from the reference:\n got %q\nwant %q", s, want)
		}
		name := r.redactName(string(data), make(tally, len(r.creds)))
		if len(name) != len(data) {
			t.Fatalf("redactName changed the length of %q to %q", data, name)
		}
		if lower := strings.ToLower(name); len(lower) == len(name) {
			for _, f := range forms {
				if strings.Contains(lower, strings.ToLower(string(f))) {
					t.Fatalf("redacted name %q still holds form %q in some case", name, f)
				}
			}
		}
	})
}

func TestRedactHeaderNamesInAnyCase(t *testing.T) {
	secret := "sk-SECRET-header-7f3a"
	r := mustRedactor(t, secret)
	h := http.Header{
		// What net/http makes of "X-sk-SECRET-header-7f3a" as it reads it.
		http.CanonicalHeaderKey("X-" + secret): {"v"},
		"X-Plain":                              {"sk-secret-header-7f3a"}, // a value keeps its case: not this secret
	}
	counts := make(tally, 1)
	r.redactHeader(h, counts)
	for k := range h {
		if strings.Contains(strings.ToLower(k), strings.ToLower(secret)) {
			t.Errorf("header name %q still holds the secret", k)
		}
	}
	if counts.total() != 1 {
		t.Errorf("%d redactions counted, want 1 (the name)", counts.total())
	}
}

func TestRedactorBoundsItsSize(t *testing.T) {
	huge := strings.Repeat(`/"<&`, credentials.MaxSecretLen/4)
	_, err := newRedactor([]injected{{credID: "c", secret: []byte(huge)}})
	if !errdefs.IsResourceExhausted(err) {
		t.Errorf("a 64 KiB punctuation secret: %v, want ErrResourceExhausted", err)
	}
}

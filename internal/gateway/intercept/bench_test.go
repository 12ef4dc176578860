package intercept

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// benchBody is what the upstream serves per request in the benchmarks:
// text with no secret in it, the common case the scanner must be fast on.
var benchBody = bytes.Repeat([]byte(`{"id":"msg_01","type":"message","content":[{"type":"text","text":"Hello, world"}]}`+"\n"), 8<<20/84)

// BenchmarkInterceptedDownload measures MB/s of a response body through an
// intercepted flow, with redaction on (the host has a credential, so a
// secret is injected and every response scanned) and off (a host without
// a rule on the same interceptor: nothing injected, nothing scanned).
// Compare the two in one run:
//
//	go test -run '^$' -bench BenchmarkInterceptedDownload -count 6 ./internal/gateway/intercept
func BenchmarkInterceptedDownload(b *testing.B) {
	for _, tt := range []struct{ name, host string }{
		{"redaction=off", "norule.example.com"},
		{"redaction=on", "api.example.com"},
	} {
		b.Run(tt.name, func(b *testing.B) {
			h := newHarness(b)
			h.setDirect(func(w http.ResponseWriter, r *http.Request) { w.Write(benchBody) })
			c, _ := h.client(flowFor(tt.host))
			b.SetBytes(int64(len(benchBody)))
			b.ResetTimer()
			for range b.N {
				req, _ := http.NewRequest("GET", "https://"+tt.host+"/", nil)
				req.Header.Set("X-Api-Key", placeholder)
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != int64(len(benchBody)) {
					b.Fatalf("read %d bytes, %v", n, err)
				}
			}
		})
	}
}

// BenchmarkRedactingBody measures the scanner alone, against a plain copy
// of the same bytes, for one secret and for eight (several rules on a
// flow, which only grows the automaton).
func BenchmarkRedactingBody(b *testing.B) {
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(benchBody)))
		for range b.N {
			io.Copy(io.Discard, struct{ io.Reader }{bytes.NewReader(benchBody)})
		}
	})
	for _, n := range []int{1, 8} {
		var secrets []string
		for i := range n {
			secrets = append(secrets, "sk-ant-api03-"+strings.Repeat(string(rune('a'+i)), 40))
		}
		r := mustRedactor(b, secrets...)
		b.Run(fmt.Sprintf("secrets=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(benchBody)))
			for range b.N {
				io.Copy(io.Discard, r.body(io.NopCloser(bytes.NewReader(benchBody)), nil))
			}
		})
	}
}

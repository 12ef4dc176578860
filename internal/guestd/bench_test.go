package guestd_test

import (
	"net/http"
	"testing"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/guestd"
)

// BenchmarkProcessTrue: the guest protocol round trip of an exec — Start
// /bin/true over HTTP/2 + Connect on the channel, stream to its end event.
func BenchmarkProcessTrue(b *testing.B) {
	c := startGuest(b, guestd.Config{})
	no := false
	req := &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "/bin/true"}, Stdin: &no}
	for b.Loop() {
		if res := run(b, c, req, ""); res.end.GetExitCode() != 0 {
			b.Fatalf("exit %d", res.end.GetExitCode())
		}
	}
}

// BenchmarkHealth: the smallest request on the channel (GET /health), the
// protocol's own cost without a process.
func BenchmarkHealth(b *testing.B) {
	c := startGuest(b, guestd.Config{})
	for b.Loop() {
		req, _ := http.NewRequestWithContext(testCtx(b), http.MethodGet, guest.BaseURL+"/health", nil)
		resp, err := c.HTTPClient().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			b.Fatalf("health: HTTP %d", resp.StatusCode)
		}
	}
}

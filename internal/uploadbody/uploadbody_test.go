package uploadbody

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestLimit sends three bodies to a handler that reads through Limit: one
// within the limit is read whole, one over it is cut and reported too
// large, and one whose client promises more than it sends and then falls
// silent is ended and reported stalled, long before the client gives up.
func TestLimit(t *testing.T) {
	type result struct {
		n                 int64
		err               error
		stalled, tooLarge bool
	}
	results := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := Limit(w, r, 10, 200*time.Millisecond)
		n, err := io.Copy(io.Discard, r.Body)
		results <- result{n, err, b.Stalled(), b.TooLarge()}
	}))
	defer srv.Close()

	post := func(body string) {
		t.Helper()
		resp, err := http.Post(srv.URL, "application/octet-stream", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	post("0123456789")
	if r := <-results; r.err != nil || r.n != 10 || r.stalled || r.tooLarge {
		t.Errorf("a body of the limit: %+v, want 10 bytes read, not stalled, not too large", r)
	}
	post("0123456789A")
	if r := <-results; r.err == nil || !r.tooLarge || r.stalled {
		t.Errorf("a body over the limit: %+v, want an error and too large", r)
	}

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\nabc"); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-results:
		if r.err == nil || !r.stalled || r.n != 3 {
			t.Errorf("a body that stops arriving: %+v, want 3 bytes read, an error and stalled", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a body that stopped arriving still holds the handler 30 s later")
	}
}

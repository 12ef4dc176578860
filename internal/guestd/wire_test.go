package guestd_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/guestd"
)

// TestConnectJSONWire speaks the Connect protocol with the JSON codec, as the
// e2b SDKs do: a unary call and a server stream of enveloped frames.
func TestConnectJSONWire(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	dir := t.TempDir()
	resp := post(t, c, "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"`+dir+`"}`))
	var stat struct {
		Entry struct {
			Name, Type, Path, Permissions string
		} `json:"entry"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&stat); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("Stat over JSON: %s: %v", resp.Status, err)
	}
	if stat.Entry.Type != "FILE_TYPE_DIRECTORY" || stat.Entry.Path != dir || !strings.HasPrefix(stat.Entry.Permissions, "d") {
		t.Errorf("Stat over JSON = %+v, want a directory entry for %s", stat.Entry, dir)
	}

	body := []byte(`{"process":{"cmd":"/bin/sh","args":["-c","echo hi"],"envs":{}},"stdin":false}`)
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body)))
	resp = post(t, c, "/process.Process/Start", "application/connect+json", append(frame, body...))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Start over connect+json: %s", resp.Status)
	}
	var msgs []string
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
			t.Fatalf("read frame header after %v: %v", msgs, err)
		}
		msg := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(resp.Body, msg); err != nil {
			t.Fatalf("read frame: %v", err)
		}
		if hdr[0]&0x02 != 0 { // end of stream
			if string(msg) != "{}" {
				t.Errorf("end-of-stream frame = %s, want {}", msg)
			}
			break
		}
		msgs = append(msgs, string(msg))
	}
	if len(msgs) != 3 || !strings.HasPrefix(msgs[0], `{"event":{"start":{"pid":`) ||
		msgs[1] != `{"event":{"data":{"stdout":"aGkK"}}}` || !strings.Contains(msgs[2], `"status":"exit status 0"`) {
		t.Errorf("stream messages = %v, want start, data aGkK, end with exit status 0", msgs)
	}
}

func post(t *testing.T, c *guest.Client, path, contentType string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), "POST", guest.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

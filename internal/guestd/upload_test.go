package guestd_test

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/guestd"
)

// cutShortBody sends some bytes, waits until the daemon has started on the
// upload (ready reports it), then fails: the client abandons the request
// midway, as a dropped connection or a killed client would.
type cutShortBody struct {
	sent  bool
	ready func() bool
}

var errCutShort = errors.New("client gave up midway")

func (b *cutShortBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, bytes.Repeat([]byte("partial "), len(p)/8)), nil
	}
	for deadline := time.Now().Add(30 * time.Second); !b.ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			break
		}
	}
	return 0, errCutShort
}

// uploadTemps lists the daemon's temporary upload files in dir.
func uploadTemps(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".*.upload-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestUploadCutShortKeepsFile overwrites a file with an upload that never
// completes: the file keeps its previous content and no partial file is left.
func TestUploadCutShortKeepsFile(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	dir := t.TempDir()
	dest := filepath.Join(dir, "config.json")
	if err := os.WriteFile(dest, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	body := &cutShortBody{ready: func() bool {
		got, _ := os.ReadFile(dest)
		return string(got) != "old" || len(uploadTemps(t, dir)) > 0
	}}
	req, err := http.NewRequestWithContext(testCtx(t), "POST", filesURL(dest, ""), body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if resp, err := c.HTTPClient().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("an upload whose body failed midway answered %s", resp.Status)
	}
	// The daemon notices the stream's reset on its own time: wait for its
	// handler to give up (its temporary file gone), then look.
	for deadline := time.Now().Add(30 * time.Second); len(uploadTemps(t, dir)) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the abandoned upload's temporary file is still there after 30 s: %v", uploadTemps(t, dir))
		}
	}
	got, err := os.ReadFile(dest)
	if err != nil || string(got) != "old" {
		t.Errorf("after an upload cut short, %s = %q, %v; want the previous content %q", dest, trunc(got), err, "old")
	}

	// A complete upload replaces it and keeps its permission bits.
	resp := doHTTP(t, c, "POST", filesURL(dest, ""), "application/octet-stream", strings.NewReader("new"))
	if got, _ := os.ReadFile(dest); resp.StatusCode != http.StatusOK || string(got) != "new" {
		t.Errorf("complete upload: %s, content %q; want 200 and %q", resp.Status, got, "new")
	}
	if fi, err := os.Stat(dest); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("replaced file mode = %v, %v; want the old file's 0640", fi.Mode(), err)
	}
	if left := uploadTemps(t, dir); len(left) > 0 {
		t.Errorf("temporary files left after a complete upload: %v", left)
	}
}

func trunc(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

package guestd_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
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

// TestUploadReplacesLargeFile: uploads over a non-empty file of more than
// the writeback chunks (8 MiB, started while the body arrives) leave
// exactly the new content, and the next one replaces it again.
func TestUploadReplacesLargeFile(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	dest := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(dest, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, size := range []int{20<<20 + 12345, 17 << 20, 3} {
		data := bytes.Repeat([]byte{byte('a' + i)}, size)
		copy(data[size/2:], "middle")
		resp := doHTTP(t, c, "POST", filesURL(dest, ""), "application/octet-stream", bytes.NewReader(data))
		got, err := os.ReadFile(dest)
		if resp.StatusCode != http.StatusOK || err != nil || !bytes.Equal(got, data) {
			t.Fatalf("upload %d of %d bytes: %s; the file has %d bytes (%v), equal %v", i, size, resp.Status, len(got), err, bytes.Equal(got, data))
		}
	}
}

func trunc(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

// TestUploadMetadata: an upload's X-Metadata-* headers become the file's
// user.e2b.* attributes, answered by the upload and by Stat; the next
// upload replaces them wholesale; bad metadata is refused (400) before
// anything is written.
func TestUploadMetadata(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	dir := t.TempDir()
	dest := filepath.Join(dir, "m.txt")
	upload := func(body string, md map[string]string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(testCtx(t), "POST", filesURL(dest, ""), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		for k, v := range md {
			req.Header[k] = []string{v} // as sent, not canonicalised
		}
		resp, err := c.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	stat := func() map[string]string {
		t.Helper()
		resp, err := c.Filesystem().Stat(testCtx(t), connect.NewRequest(&filesystemv1.StatRequest{Path: dest}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetEntry().GetMetadata()
	}
	resp, body := upload("one", map[string]string{"X-Metadata-Owner": "alice", "x-metadata-stage": "raw data"})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"metadata":{"owner":"alice","stage":"raw data"}`) {
		t.Fatalf("upload with metadata: %s %s", resp.Status, body)
	}
	if got := stat(); len(got) != 2 || got["owner"] != "alice" || got["stage"] != "raw data" {
		t.Errorf("Stat metadata %v, want owner=alice stage=raw data", got)
	}
	if resp, body = upload("two", map[string]string{"X-Metadata-Stage": "clean"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("second upload: %s %s", resp.Status, body)
	}
	if got := stat(); len(got) != 1 || got["stage"] != "clean" {
		t.Errorf("after a second upload, metadata %v, want only stage=clean (replaced wholesale)", got)
	}
	if resp, body = upload("three", nil); resp.StatusCode != http.StatusOK || strings.Contains(body, "metadata") {
		t.Fatalf("upload without metadata: %s %s", resp.Status, body)
	}
	if got := stat(); len(got) != 0 {
		t.Errorf("after an upload without metadata, metadata %v, want none", got)
	}
	for name, md := range map[string]map[string]string{
		"value not ASCII": {"X-Metadata-K": "caf\xe9"},
		"key too long":    {"X-Metadata-" + strings.Repeat("k", 247): "v"},
		"no key":          {"X-Metadata-": "v"},
		"over 4096 bytes": {"X-Metadata-A": strings.Repeat("v", 2100), "X-Metadata-B": strings.Repeat("v", 2100)},
		"twice by case":   {"X-Metadata-K": "1", "x-metadata-k": "2"},
	} {
		resp, body := upload("refused", md)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "metadata") {
			t.Errorf("%s: %s %s, want 400 naming the metadata", name, resp.Status, body)
		}
		if got, _ := os.ReadFile(dest); string(got) != "three" {
			t.Errorf("%s: file is %q after a refused upload, want it unchanged", name, got)
		}
	}
}

func FuzzMetadataHeaders(f *testing.F) {
	f.Add("X-Metadata-Owner", "alice", "x-metadata-b", "")
	f.Add("X-Metadata-", "v", "Content-Type", "text/plain")
	f.Add("x-METADATA-k", "\x7f", "X-Metadata-K", "x")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		md, err := guestd.ParseMetadataHeaders(http.Header{k1: {v1}, k2: {v2}})
		if err != nil {
			return
		}
		total := 0
		for k, v := range md {
			if k == "" || k != strings.ToLower(k) || len(k) > 246 {
				t.Fatalf("accepted key %q", k)
			}
			for i := 0; i < len(v); i++ {
				if v[i] < 0x20 || v[i] > 0x7e {
					t.Fatalf("accepted value %q", v)
				}
			}
			total += len("user.e2b.") + len(k) + 1 + len(v)
		}
		if total > 4096 {
			t.Fatalf("accepted %d bytes of metadata", total)
		}
	})
}

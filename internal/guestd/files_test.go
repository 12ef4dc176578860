package guestd_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/guestd"
)

func filesURL(path, user string) string {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	if user != "" {
		q.Set("username", user)
	}
	return guest.BaseURL + "/files?" + q.Encode()
}

func doHTTP(t *testing.T, c *guest.Client, method, u, contentType string, body io.Reader) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestFilesStreamConstantMemory sends 100 MiB up and back down and checks
// the heap (daemon and client share this process) never grows by more than
// a bound far below the file size.
func TestFilesStreamConstantMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 200 MiB through the daemon")
	}
	const size = 100 << 20
	const maxGrowth = 48 << 20
	c := startGuest(t, guestd.Config{})
	path := t.TempDir() + "/big.bin"

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	peak, stop := sampleHeap()

	src := io.LimitReader(rand.NewChaCha8([32]byte{1}), size)
	up := sha256.New()
	resp := doHTTP(t, c, "POST", filesURL(path, ""), "application/octet-stream", io.TeeReader(src, up))
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /files: %s: %s", resp.Status, b)
	}
	var entries []map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&entries); err != nil || len(entries) != 1 ||
		entries[0]["path"] != path || entries[0]["name"] != "big.bin" || entries[0]["type"] != "file" {
		t.Fatalf("POST /files answer = %v, %v; want [{path %s, name big.bin, type file}]", entries, err, path)
	}
	resp = doHTTP(t, c, "GET", filesURL(path, ""), "", nil)
	down := sha256.New()
	n, err := io.Copy(down, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /files: %s, copied %d: %v", resp.Status, n, err)
	}
	growth := stop() - before.HeapInuse
	if n != size || !bytes.Equal(up.Sum(nil), down.Sum(nil)) {
		t.Errorf("read back %d bytes with a different digest, want the %d bytes written", n, size)
	}
	if int64(growth) > maxGrowth {
		t.Errorf("heap grew by %d MiB while streaming 100 MiB, want < %d MiB", growth>>20, maxGrowth>>20)
	}
	t.Logf("peak heap growth %d KiB (peak %d KiB)", growth>>10, peak()>>10)
}

// sampleHeap records the peak HeapInuse until stop is called.
func sampleHeap() (peak func() uint64, stop func() uint64) {
	var mu sync.Mutex
	var max uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			mu.Lock()
			if ms.HeapInuse > max {
				max = ms.HeapInuse
			}
			mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	peak = func() uint64 { mu.Lock(); defer mu.Unlock(); return max }
	stop = func() uint64 { close(done); <-finished; return peak() }
	return peak, stop
}

func TestFilesMultipartAndErrors(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	dir := t.TempDir()

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for name, content := range map[string]string{dir + "/m/one.txt": "1", dir + "/m/deep/two.txt": "22"} {
		w, _ := mw.CreateFormFile("file", name)
		io.WriteString(w, content)
	}
	mw.Close()
	resp := doHTTP(t, c, "POST", filesURL("", ""), mw.FormDataContentType(), &body)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("multipart POST: %s: %s", resp.Status, b)
	}
	for name, want := range map[string]string{dir + "/m/one.txt": "1", dir + "/m/deep/two.txt": "22"} {
		got, err := os.ReadFile(name)
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
		resp := doHTTP(t, c, "GET", filesURL(name, ""), "", nil)
		b, _ := io.ReadAll(resp.Body)
		if string(b) != want {
			t.Errorf("GET %s = %q, want %q", name, b, want)
		}
	}
	// Overwrite through the path query.
	resp = doHTTP(t, c, "POST", filesURL(dir+"/m/one.txt", ""), "application/octet-stream", bytes.NewReader([]byte("new")))
	if got, _ := os.ReadFile(dir + "/m/one.txt"); resp.StatusCode != http.StatusOK || string(got) != "new" {
		t.Errorf("overwrite: %s, content %q, want 200 and %q", resp.Status, got, "new")
	}
	fifo := dir + "/fifo"
	if err := mkfifo(fifo); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name, method, url string
		want              int
	}{
		{"missing file", "GET", filesURL(dir+"/missing", ""), http.StatusNotFound},
		{"directory", "GET", filesURL(dir, ""), http.StatusBadRequest},
		{"fifo", "GET", filesURL(fifo, ""), http.StatusBadRequest},
		{"NUL in path", "GET", guest.BaseURL + "/files?path=" + url.QueryEscape(dir+"/a\x00b"), http.StatusBadRequest},
		{"no path", "GET", filesURL("", ""), http.StatusBadRequest},
		{"unknown user", "GET", filesURL(dir+"/m/one.txt", "no-such-user"), http.StatusUnauthorized},
		{"write without path", "POST", filesURL("", ""), http.StatusBadRequest},
		{"write over a directory", "POST", filesURL(dir+"/m", ""), http.StatusBadRequest},
		{"write over a fifo", "POST", filesURL(fifo, ""), http.StatusBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			ct := ""
			if tt.method == "POST" {
				body, ct = bytes.NewReader([]byte("x")), "application/octet-stream"
			}
			resp := doHTTP(t, c, tt.method, tt.url, ct, body)
			if resp.StatusCode != tt.want {
				t.Errorf("status = %s, want %d", resp.Status, tt.want)
			}
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Code != tt.want || e.Message == "" {
				t.Errorf("error body = %+v, %v; want {code: %d, message}", e, err, tt.want)
			}
		})
	}
}

func TestFilesOwnedByUser(t *testing.T) {
	requireRoot(t, "switches to another user")
	c := startGuest(t, guestd.Config{})
	dir := t.TempDir()
	resp := doHTTP(t, c, "POST", filesURL(dir+"/n/f.txt", "nobody"), "application/octet-stream", bytes.NewReader([]byte("x")))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST: %s", resp.Status)
	}
	for _, p := range []string{dir + "/n", dir + "/n/f.txt"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if uid := statUID(fi); uid != 65534 {
			t.Errorf("%s owned by uid %d, want nobody (65534)", p, uid)
		}
	}
}

func TestHealth(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	if resp := doHTTP(t, c, "GET", guest.BaseURL+"/health", "", nil); resp.StatusCode != http.StatusNoContent {
		t.Errorf("GET /health = %s, want 204", resp.Status)
	}
}

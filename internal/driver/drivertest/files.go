package drivertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
	"github.com/spacesandbox/space/internal/guest"
)

// testFiles covers /files and the filesystem service on one execution.
func testFiles(t *testing.T, s *suite) {
	// The 100 MiB file lives in /tmp: on a host kernel /tmp is a tmpfs
	// charged to the sandbox's memory, so it gets room for it; in a VM /tmp
	// is on the sandbox's disk and the default size (sharing the default
	// template snapshot) does.
	mem := 512
	if s.ownKernel {
		mem = 0
	}
	sb := s.start(t, options{memoryMiB: mem})
	tests := []struct {
		name string
		fn   func(t *testing.T, sb *sandbox)
	}{
		{"WriteRead", testWriteRead},
		{"Stream100MiB", testStream100MiB},
		{"Operations", testFileOperations},
		{"WatchRecursive", testWatchRecursive},
		{"DotDotStaysInside", testDotDot},
		{"SymlinkToHostPath", testSymlinkToHost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, sb)
		})
	}
}

// filesURL is the /files URL for path.
func filesURL(path string) string {
	return guest.BaseURL + "/files?" + url.Values{"path": {path}}.Encode()
}

// putFile writes body to path through POST /files (octet-stream).
func (sb *sandbox) putFile(ctx context.Context, path string, body io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, filesURL(path), body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := sb.client.HTTPClient().Do(req)
	if err != nil {
		return fmt.Errorf("POST /files %s: %w", path, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /files %s: %s: %s", path, resp.Status, msg)
	}
	return nil
}

// getFile opens path through GET /files; the caller closes the body. A
// status other than 200 is returned with the body's start as the error.
func (sb *sandbox) getFile(ctx context.Context, path string) (io.ReadCloser, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, filesURL(path), nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := sb.client.HTTPClient().Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("GET /files %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, resp.StatusCode, fmt.Errorf("GET /files %s: %s: %s", path, resp.Status, msg)
	}
	return resp.Body, resp.StatusCode, nil
}

// readFile reads a small file through GET /files.
func (sb *sandbox) readFile(ctx context.Context, path string) ([]byte, int, error) {
	body, code, err := sb.getFile(ctx, path)
	if err != nil {
		return nil, code, err
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, 1<<20))
	return b, code, err
}

func testWriteRead(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	data := []byte("hello files\x00\xff\n")
	if err := sb.putFile(ctx, "/tmp/wr/hello.bin", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	got, _, err := sb.readFile(ctx, "/tmp/wr/hello.bin")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %q, %v; want %q", got, err, data)
	}
	// The sandbox sees the same bytes.
	if out := sb.sh(t, "od -An -c /tmp/wr/hello.bin | tr -s ' '"); !strings.Contains(out, "h e l l o") {
		t.Errorf("inside the sandbox the file reads %q", out)
	}
	if _, code, err := sb.readFile(ctx, "/tmp/wr/missing"); code != http.StatusNotFound {
		t.Errorf("GET a missing file: status %d (%v), want 404", code, err)
	}
}

// testStream100MiB writes and reads back 100 MiB, hashing on the fly on both
// sides, while a sampler watches this process's heap: a client or transport
// that buffered the file would grow the heap by about its size.
func testStream100MiB(t *testing.T, sb *sandbox) {
	const size = 100 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	peak := sampleHeap(t)

	src := io.LimitReader(rand.NewChaCha8([32]byte{1, 2, 3}), size)
	sent := sha256.New()
	if err := sb.putFile(ctx, "/tmp/big.bin", io.TeeReader(src, sent)); err != nil {
		t.Fatal(err)
	}
	body, _, err := sb.getFile(ctx, "/tmp/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, body)
	body.Close()
	if err != nil || n != size {
		t.Fatalf("read back: %d bytes, %v; want %d", n, err, size)
	}
	if !bytes.Equal(sent.Sum(nil), got.Sum(nil)) {
		t.Fatalf("sha256 of the file read back %x differs from what was written %x", got.Sum(nil), sent.Sum(nil))
	}
	if out := strings.TrimSpace(sb.sh(t, "wc -c < /tmp/big.bin")); out != fmt.Sprint(size) {
		t.Errorf("size inside the sandbox: %s, want %d", out, size)
	}
	grew := peak()
	t.Logf("host heap growth during the 100 MiB round trip: %.1f MiB", float64(grew)/(1<<20))
	if grew > 64<<20 {
		t.Errorf("host heap grew by %d MiB during a 100 MiB round trip; want it streamed (bounded, < 64 MiB)", grew>>20)
	}
	if err := sb.remove(ctx, "/tmp/big.bin"); err != nil {
		t.Error(err)
	}
}

// sampleHeap samples the heap in use until the returned function is called,
// which returns the peak growth over the starting value.
func sampleHeap(t *testing.T) func() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
	}()
	var once sync.Once
	done := func() uint64 {
		once.Do(func() { close(stop); wg.Wait() })
		return peak - base
	}
	t.Cleanup(func() { done() })
	return done
}

func (sb *sandbox) remove(ctx context.Context, path string) error {
	if _, err := sb.client.Filesystem().Remove(ctx, connect.NewRequest(&filesystemv1.RemoveRequest{Path: path})); err != nil {
		return fmt.Errorf("Remove %s: %w", path, err)
	}
	return nil
}

func testFileOperations(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	fs := sb.client.Filesystem()
	mk, err := fs.MakeDir(ctx, connect.NewRequest(&filesystemv1.MakeDirRequest{Path: "/tmp/ops/a/b"}))
	if err != nil {
		t.Fatalf("MakeDir: %v", err)
	}
	if e := mk.Msg.GetEntry(); e.GetPath() != "/tmp/ops/a/b" || e.GetType() != filesystemv1.FileType_FILE_TYPE_DIRECTORY {
		t.Errorf("MakeDir entry: %v, want the directory /tmp/ops/a/b", e)
	}
	if _, err := fs.MakeDir(ctx, connect.NewRequest(&filesystemv1.MakeDirRequest{Path: "/tmp/ops/a/b"})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("MakeDir of an existing directory: %v, want AlreadyExists", err)
	}
	if err := sb.putFile(ctx, "/tmp/ops/a/b/f.txt", strings.NewReader("12345")); err != nil {
		t.Fatal(err)
	}
	st, err := fs.Stat(ctx, connect.NewRequest(&filesystemv1.StatRequest{Path: "/tmp/ops/a/b/f.txt"}))
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	if e := st.Msg.GetEntry(); e.GetName() != "f.txt" || e.GetSize() != 5 || e.GetType() != filesystemv1.FileType_FILE_TYPE_FILE || e.GetOwner() != "root" {
		t.Errorf("Stat: %v, want file f.txt of 5 bytes owned by root", e)
	}
	ls, err := fs.ListDir(ctx, connect.NewRequest(&filesystemv1.ListDirRequest{Path: "/tmp/ops", Depth: 3}))
	if err != nil {
		t.Fatalf("ListDir: %v", err)
	}
	var paths []string
	for _, e := range ls.Msg.GetEntries() {
		paths = append(paths, e.GetPath())
	}
	if want := "/tmp/ops/a /tmp/ops/a/b /tmp/ops/a/b/f.txt"; strings.Join(slices.Sorted(slices.Values(paths)), " ") != want {
		t.Errorf("ListDir depth 3: %v, want %s", paths, want)
	}
	mv, err := fs.Move(ctx, connect.NewRequest(&filesystemv1.MoveRequest{Source: "/tmp/ops/a/b/f.txt", Destination: "/tmp/ops/g.txt"}))
	if err != nil {
		t.Fatalf("Move: %v", err)
	}
	if mv.Msg.GetEntry().GetPath() != "/tmp/ops/g.txt" {
		t.Errorf("Move entry: %v", mv.Msg.GetEntry())
	}
	if got, _, err := sb.readFile(ctx, "/tmp/ops/g.txt"); err != nil || string(got) != "12345" {
		t.Errorf("moved file reads %q, %v", got, err)
	}
	if _, err := fs.Stat(ctx, connect.NewRequest(&filesystemv1.StatRequest{Path: "/tmp/ops/a/b/f.txt"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Stat of the move's source: %v, want NotFound", err)
	}
	if err := sb.remove(ctx, "/tmp/ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(ctx, connect.NewRequest(&filesystemv1.StatRequest{Path: "/tmp/ops"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Stat after Remove: %v, want NotFound", err)
	}
}

func testWatchRecursive(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	fs := sb.client.Filesystem()
	if _, err := fs.MakeDir(ctx, connect.NewRequest(&filesystemv1.MakeDirRequest{Path: "/tmp/watched/sub"})); err != nil {
		t.Fatalf("MakeDir: %v", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := fs.WatchDir(wctx, connect.NewRequest(&filesystemv1.WatchDirRequest{Path: "/tmp/watched", Recursive: true}))
	if err != nil {
		t.Fatalf("WatchDir: %v", err)
	}
	defer w.Close()
	if !w.Receive() || w.Msg().GetStart() == nil {
		t.Fatalf("WatchDir: first message %v (%v), want start", w.Msg(), w.Err())
	}
	if err := sb.putFile(ctx, "/tmp/watched/sub/new.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	for w.Receive() {
		ev := w.Msg().GetFilesystem()
		if ev != nil && ev.GetName() == "sub/new.txt" && ev.GetType() == filesystemv1.EventType_EVENT_TYPE_CREATE {
			return
		}
	}
	t.Fatalf("watch ended without a create event for sub/new.txt: %v", w.Err())
}

// testDotDot: ".." in a path is resolved inside the sandbox's own root; it
// never reaches the host.
func testDotDot(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	name := "dotdot-" + sb.spec.ExecID
	if err := sb.putFile(ctx, "/../../../../tmp/../tmp/"+name, strings.NewReader("inside")); err != nil {
		t.Fatal(err)
	}
	if got := sb.sh(t, "cat /tmp/"+name); got != "inside" {
		t.Errorf("the file written through a .. path reads %q in the sandbox, want %q", got, "inside")
	}
	if _, err := os.Lstat("/tmp/" + name); err == nil {
		os.Remove("/tmp/" + name)
		t.Errorf("writing /../../../../tmp/%s through the guest created the host's /tmp/%s", name, name)
	}
	if got, _, err := sb.readFile(ctx, "../../../../../../tmp/"+name); err != nil || string(got) != "inside" {
		t.Errorf("reading through a relative .. path: %q, %v; want %q", got, err, "inside")
	}
}

// testSymlinkToHost: a symlink in the sandbox naming a host path resolves in
// the sandbox's root, so it does not reach the host file.
func testSymlinkToHost(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := "/tmp/link-" + sb.spec.ExecID
	sb.sh(t, "ln -s "+secret+" "+link)
	got, code, err := sb.readFile(ctx, link)
	if bytes.Contains(got, []byte("host secret")) {
		t.Fatalf("GET /files of a symlink to the host file %s returned the host file's content", secret)
	}
	if code != http.StatusNotFound {
		t.Errorf("GET /files of a dangling (in the sandbox) symlink: status %d (%v), want 404", code, err)
	}
	if _, err := sb.client.Filesystem().Stat(ctx, connect.NewRequest(&filesystemv1.StatRequest{Path: link})); err != nil {
		t.Errorf("Stat of the symlink itself: %v", err)
	}
	// Writing through the link creates the file inside the sandbox, never on the host.
	if err := sb.putFile(ctx, link, strings.NewReader("overwritten")); err != nil {
		t.Logf("writing through the link was refused: %v", err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "host secret" {
		t.Errorf("the host file behind the link now reads %q (%v); the guest wrote through to the host", b, err)
	}
}

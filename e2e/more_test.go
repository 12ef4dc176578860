package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"
)

// TestServiceEndpoints checks the unauthenticated endpoints and idempotent create.
func TestServiceEndpoints(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	for path, want := range map[string]string{
		"/healthz":      `"ok"`,
		"/openapi.json": `"openapi"`,
	} {
		resp, err := http.Get(in.url + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte(want)) {
			t.Errorf("GET %s: HTTP %d %.200s", path, resp.StatusCode, b)
		}
	}

	// The same Idempotency-Key replays the first answer: one sandbox, not two.
	body := []byte(`{"template":"minimal","runtime":"ns","memory_mib":128}`)
	var ids []string
	for range 2 {
		req, _ := http.NewRequest("POST", in.url+"/v1/sandboxes", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+in.key)
		req.Header.Set("Idempotency-Key", "create-once")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var sb sandbox
		json.NewDecoder(resp.Body).Decode(&sb)
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("idempotent create: HTTP %d", resp.StatusCode)
		}
		ids = append(ids, sb.ID)
	}
	if ids[0] != ids[1] {
		t.Errorf("idempotent create made %s and %s", ids[0], ids[1])
	}
	// Reusing the key for another request is a conflict.
	req, _ := http.NewRequest("POST", in.url+"/v1/sandboxes", strings.NewReader(`{"template":"minimal","runtime":"ns","memory_mib":256}`))
	req.Header.Set("Authorization", "Bearer "+in.key)
	req.Header.Set("Idempotency-Key", "create-once")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("key reused for another body: HTTP %d, want 409", resp.StatusCode)
	}

	// A sandbox with a timeout is deleted when it passes.
	var short sandbox
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 128, "timeout": "2s"}, &short); code != 201 {
		t.Fatalf("create with timeout: HTTP %d", code)
	}
	deadline := time.Now().Add(20 * time.Second)
	for in.do("GET", "/v1/sandboxes/"+short.ID, nil, nil) != http.StatusNotFound {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox with a 2s timeout still exists after 20s")
		}
		time.Sleep(200 * time.Millisecond)
	}

	// /metrics counts every tenant's sandboxes: not for anonymous callers.
	resp, err = http.Get(in.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics without a key: HTTP %d, want 401", resp.StatusCode)
	}
	req, _ = http.NewRequest(http.MethodGet, in.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+in.key) // the admin key
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"space_http_requests_total", "space_sandbox_create_seconds_count 2", `space_sandboxes{state="running"} 1`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	in.delete(ids[0])
}

// TestLargeFileAndWatch streams 100 MiB in and out and watches a directory.
func TestLargeFileAndWatch(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	sb := in.create("minimal")
	defer in.delete(sb.ID)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(in.url, "http") + "/v1/sandboxes/" + sb.ID + "/files/watch?path=/home/user&recursive=true"
	ws, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + in.key}}})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer ws.CloseNow()

	const size = 100 << 20
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(rand.Reader, size), h)
	req, _ := http.NewRequestWithContext(ctx, "PUT", in.url+"/v1/sandboxes/"+sb.ID+"/files?path=/home/user/big.bin", src)
	req.Header.Set("Authorization", "Bearer "+in.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write 100 MiB: %v %v", err, resp)
	}
	resp.Body.Close()
	want := h.Sum(nil)

	req, _ = http.NewRequestWithContext(ctx, "GET", in.url+"/v1/sandboxes/"+sb.ID+"/files?path=/home/user/big.bin", nil)
	req.Header.Set("Authorization", "Bearer "+in.key)
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("read 100 MiB: %v %v", err, resp)
	}
	h2 := sha256.New()
	n, _ := io.Copy(h2, resp.Body)
	resp.Body.Close()
	if n != size || !bytes.Equal(h2.Sum(nil), want) {
		t.Fatalf("read back %d bytes, digest match %v", n, bytes.Equal(h2.Sum(nil), want))
	}

	var ev struct{ Name, Type string }
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("no watch event for big.bin: %v", err)
		}
		json.Unmarshal(msg, &ev)
		if strings.Contains(ev.Name, "big.bin") {
			break
		}
	}
	if ev.Type == "" {
		t.Errorf("watch event without a type: %+v", ev)
	}

	// Overwriting it swaps the new file in: a second hard link to the old
	// one keeps the old 100 MiB, now its only name.
	if res := in.exec(sb.ID, "ln", "/home/user/big.bin", "/home/user/big.old"); res.ExitCode != 0 {
		t.Fatalf("ln: %+v", res)
	}
	req, _ = http.NewRequestWithContext(ctx, "PUT", in.url+"/v1/sandboxes/"+sb.ID+"/files?path=/home/user/big.bin", strings.NewReader("small"))
	req.Header.Set("Authorization", "Bearer "+in.key)
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("overwrite big.bin: %v %v", err, resp)
	}
	resp.Body.Close()
	if res := in.exec(sb.ID, "cat", "/home/user/big.bin"); res.Stdout != "small" {
		t.Errorf("big.bin after the overwrite = %q, want %q", res.Stdout, "small")
	}
	if res := in.exec(sb.ID, "sh", "-c", "wc -c < /home/user/big.old; stat -c %h /home/user/big.old; ls -a /home/user"); !strings.HasPrefix(res.Stdout, "104857600\n1\n") || strings.Contains(res.Stdout, ".upload-") {
		t.Errorf("the old file's other link after the overwrite: %q; want its 104857600 bytes, 1 link, no temporary file", res.Stdout)
	}
}

// TestTTYAndCustomTemplate runs `space exec --tty` on a real terminal, and a
// sandbox from a template built from a directory that has no `user` account.
func TestTTYAndCustomTemplate(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()

	root := filepath.Join(t.TempDir(), "rootfs")
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox not installed")
	}
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	data, _ := os.ReadFile(bb)
	os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755)
	for _, applet := range []string{"sh", "id", "tty", "stty", "echo", "cat"} {
		os.Symlink("busybox", filepath.Join(root, "bin", applet))
	}
	if _, e, c := in.cli("", "template", "build", "tiny", "--from", root); c != 0 {
		t.Fatalf("template build: %d %s\n%s", c, e, in.logs())
	}
	var sb struct {
		sandbox
		Message string `json:"message"`
	}
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "tiny", "runtime": "ns", "memory_mib": 128}, &sb); code != 201 {
		t.Fatalf("create from tiny: HTTP %d %s\n%s", code, sb.Message, in.logs())
	}
	defer in.delete(sb.ID)
	if res := in.exec(sb.ID, "id", "-u"); res.Stdout != "0\n" {
		t.Errorf("default user in a template without `user`: %+v, want root", res)
	}

	cmd := exec.Command(bin.space, "exec", "--tty", sb.ID, "--", "sh", "-c", "tty; stty size")
	cmd.Env = append(os.Environ(), "SPACE_API_URL="+in.url, "SPACE_API_KEY="+in.key)
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 33, Cols: 99})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, ptmx); close(done) }()
	if err := cmd.Wait(); err != nil {
		t.Errorf("space exec --tty: %v", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	if !strings.Contains(out.String(), "/dev/pts/") || !strings.Contains(out.String(), "33 99") {
		t.Errorf("tty exec printed %q, want a /dev/pts device and size 33 99", out.String())
	}
}

// TestPauseResume freezes a sandbox in place and lets it continue: same
// execution, processes stopped while paused, refused requests meanwhile.
func TestPauseResume(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	sb := in.create("minimal")
	defer in.delete(sb.ID)
	in.exec(sb.ID, "sh", "-c", "(i=0; while :; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done) >/dev/null 2>&1 &")
	time.Sleep(500 * time.Millisecond)
	before := in.exec(sb.ID, "cat", "/tmp/c")

	if _, e, c := in.cli("", "sandbox", "pause", sb.ID); c != 0 {
		t.Fatalf("sandbox pause: %d %s", c, e)
	}
	var got sandbox
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
	if got.State != "paused" || got.Generation != sb.Generation {
		t.Fatalf("after pause: %+v", got)
	}
	var e struct{ Code, Message string }
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"true"}}, &e); code != http.StatusConflict || !strings.Contains(e.Message, "paused") {
		t.Errorf("exec while paused: HTTP %d %+v, want 409 naming the state", code, e)
	}
	time.Sleep(2 * time.Second)
	if _, e, c := in.cli("", "sandbox", "resume", sb.ID); c != 0 {
		t.Fatalf("sandbox resume: %d %s", c, e)
	}
	after := in.exec(sb.ID, "cat", "/tmp/c")
	var n0, n1 int
	fmt.Sscan(before.Stdout, &n0)
	fmt.Sscan(after.Stdout, &n1)
	// Two seconds of running would add about 20; paused, it adds only what
	// ran around the pause and resume calls.
	if n1 < n0 || n1-n0 > 15 {
		t.Errorf("counter %d before pause, %d after 2 s paused: the sandbox kept running", n0, n1)
	}
	time.Sleep(500 * time.Millisecond)
	if later := in.exec(sb.ID, "cat", "/tmp/c"); later.Stdout == after.Stdout {
		t.Errorf("counter stuck at %q after resume", later.Stdout)
	}
	// Resume on a running sandbox changes nothing; pause on deleting is 409.
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/resume", nil, &got); code != 200 || got.State != "running" {
		t.Errorf("resume of a running sandbox: HTTP %d %+v", code, got)
	}
}

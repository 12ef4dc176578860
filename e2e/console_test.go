package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
)

// TestConsole drives the web console (console/, docs/console.md) in Debian's
// headless Chromium and Firefox ESR through playwright-core (pinned in
// console/'s lockfile):
// a wrong key refused, sign-in, create an ns sandbox from the form (size,
// env, timeout; a bad env line refused) landing in its focused terminal,
// `echo hello` read back, a process's markup output as text, pause and resume, hibernate and restore, with only the legal moves
// offered, the terminal's resize reaching the PTY, the server's refusal
// shown as it says it, stop and start with the terminal reconnecting; the
// file browser (navigate, open a text file as text, upload, download, a
// file named <img src=x onerror=alert(1)> shown as text); exposed ports
// with their URL; snapshots (take, a refused full one, rollback, a refused
// delete, delete, fork landing on the child); the events timeline; a phone
// width without sideways scroll; a metadata XSS attempt rendered as text;
// the table's search and state filter; delete confirmation (cancel, one
// row, bulk); the running processes; the egress editor (a bad entry refused
// by the form, a refusal by the server as it says it, a saved policy read
// back); credentials (metadata only: the secret in no response the console
// read nor in the page), the audit log, a template built from dir: with its
// progress, nodes (committed as the sandboxes on it hold, drain asked first:
// cancel, drain, undrain), tenants and their keys; a tenant's key is offered
// no admin page, is refused one by the API and the console alike, and sees
// no other tenant's sandbox or credential; CPU and memory now (the metrics
// route) in the table and as an SVG chart on the sandbox's page; disk and
// the whole life from GET /v1/sandboxes/{id}/metrics; a refused move as a
// "refused" event in the timeline; a node's used memory; quotas edited and
// keys created (secret shown once) and revoked; the build log; Escape
// cancelling a confirmation; a bulk delete where one fails. No
// Content-Security-Policy violation may be reported.
// Screenshots are kept in a directory the test prints.
//
// The same checks run in each browser, as a subtest: chromium (Debian's
// chromium over CDP) and firefox (Debian's firefox-esr over WebDriver BiDi,
// playwright-core's BiDi Firefox), each against its own server.
func TestConsole(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	playwright := filepath.Join(root, "console", "node_modules", "playwright-core")
	if _, err := os.Stat(playwright); err != nil {
		t.Fatalf("playwright-core is not installed (%v): run make build, which runs npm ci in console/", err)
	}
	for _, b := range []struct{ name, exe, pkg string }{
		{"chromium", "/usr/bin/chromium", "chromium"},
		{"firefox", "/usr/bin/firefox-esr", "firefox-esr"},
	} {
		t.Run(b.name, func(t *testing.T) {
			if _, err := os.Stat(b.exe); err != nil {
				t.Fatalf("Debian's %s is not installed (%v): run make deps-test", b.pkg, err)
			}
			consoleIn(t, b.name, playwright)
		})
	}
}

// consoleIn runs testdata/console/console.mjs in browser (chromium or
// firefox) against a server of its own.
func consoleIn(t *testing.T, browser, playwright string) {
	in := startServer(t, t.TempDir())
	resp, err := http.Get(in.url + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /console/: HTTP %d %s: build the console (make build) before the e2e tests", resp.StatusCode, page)
	}
	in.waitTemplate("minimal")

	const payload = `<img src=x onerror="window.__xss=1;alert(1)">`
	var xss struct {
		ID string `json:"id"`
	}
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256,
		"metadata": map[string]string{"label": payload}}, &xss); code != http.StatusCreated {
		t.Fatalf("create the XSS sandbox: HTTP %d", code)
	}
	// The console deletes it; this is for a run that fails first.
	defer in.do("DELETE", "/v1/sandboxes/"+xss.ID, nil, nil)

	// A root file system the console builds a template from (dir:).
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("busybox is not installed (%v): run make deps-test", err)
	}
	tree := filepath.Join(t.TempDir(), "rootfs")
	bin, _ := os.ReadFile(bb)
	if err := os.MkdirAll(filepath.Join(tree, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "bin", "busybox"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "echo", "cat"} {
		if err := os.Symlink("busybox", filepath.Join(tree, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}

	// Kept after the test, as its artifacts.
	shots, err := os.MkdirTemp("", "space-console-shots-"+browser+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", shots)
	cmd := exec.Command("node", "testdata/console/console.mjs")
	cmd.Env = append(os.Environ(), "SPACE_URL="+in.url, "SPACE_KEY="+in.key, "XSS_ID="+xss.ID, "XSS_PAYLOAD="+payload,
		"SHOTS="+shots, "PLAYWRIGHT="+playwright, "TEMPLATE_DIR="+tree, "BROWSER="+browser)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("console.mjs: %v\n%s%s\nserver:\n%s", err, stderr.String(), out, in.logs())
	}
	var res struct {
		OK       bool     `json:"ok"`
		Problems []string `json:"problems"`
		Steps    []string `json:"steps"`
		ID       string   `json:"id"`
		Fork     string   `json:"fork"`
		Victim   string   `json:"victim"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("console.mjs printed %q: %v\n%s", out, err, stderr.String())
	}
	if res.Victim != "" {
		defer in.do("DELETE", "/v1/sandboxes/"+res.Victim, nil, nil)
	}
	t.Logf("console.mjs:\n%s", stderr.String())
	if !res.OK {
		t.Fatalf("console: %s (steps %v)\n%s", strings.Join(res.Problems, "; "), res.Steps, stderr.String())
	}
	// The console's deletes (one row's, the bulk one) reached the server
	// (the bulk delete's third sandbox the test deleted itself).
	for _, id := range []string{res.ID, res.Fork, xss.ID, res.Victim} {
		var sb struct {
			State string `json:"state"`
		}
		if code := in.do("GET", "/v1/sandboxes/"+id, nil, &sb); code != http.StatusNotFound && sb.State != "deleting" && sb.State != "deleted" {
			t.Errorf("sandbox %s after the console deleted it: HTTP %d, state %q", id, code, sb.State)
		}
	}
}

// TestConsoleWebSocketKey: the exec WebSocket takes the API key as a
// space.bearer.<key> subprotocol, as a browser must send it, selects
// space.exec.v1 (never echoing the key), runs the command; a wrong key so
// sent is refused with 401 before any upgrade.
func TestConsoleWebSocketKey(t *testing.T) {
	in := startServer(t, t.TempDir())
	in.waitTemplate("minimal")
	sb := in.create("minimal")
	defer in.delete(sb.ID)
	wsURL := "ws" + strings.TrimPrefix(in.url, "http") + "/v1/sandboxes/" + sb.ID + "/exec"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Subprotocols: []string{"space.exec.v1", "space.bearer.space_k-000000000000000000_" + strings.Repeat("0", 64)}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong key as a subprotocol: %v, %+v; want a 401", err, resp)
	}

	ws, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Subprotocols: []string{"space.exec.v1", "space.bearer." + in.key}})
	if err != nil {
		t.Fatalf("dial with the key as a subprotocol: %v", err)
	}
	defer ws.CloseNow()
	if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != "space.exec.v1" {
		t.Fatalf("the server selected subprotocol %q, want space.exec.v1", got)
	}
	if err := wsjson.Write(ctx, ws, map[string]any{"cmd": []string{"echo", "via-subprotocol"}}); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for {
		var m struct {
			Type     string `json:"type"`
			Data     []byte `json:"data"`
			ExitCode *int   `json:"exit_code"`
			Message  string `json:"message"`
		}
		if err := wsjson.Read(ctx, ws, &m); err != nil {
			t.Fatalf("read: %v (output so far %q)", err, out)
		}
		if m.Type == "error" {
			t.Fatalf("exec: %s", m.Message)
		}
		out = append(out, m.Data...)
		if m.Type == "exit" {
			break
		}
	}
	if string(out) != "via-subprotocol\n" {
		t.Fatalf("output %q, want via-subprotocol", out)
	}
}

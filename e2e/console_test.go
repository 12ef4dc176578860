package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestConsole drives the web console (console/, docs/console.md) in Debian's
// headless Chromium through playwright-core (pinned in console/'s lockfile):
// a wrong key refused, sign-in, create an ns sandbox, `echo hello` in its
// terminal read back, pause and resume with only the legal moves offered,
// the terminal's resize reaching the PTY, the server's refusal shown as it
// says it, stop and start, a sandbox's metadata that is an XSS attempt
// rendered as text, delete. No
// Content-Security-Policy violation may be reported. Screenshots are kept in
// a directory the test prints.
func TestConsole(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	playwright := filepath.Join(root, "console", "node_modules", "playwright-core")
	if _, err := os.Stat(playwright); err != nil {
		t.Fatalf("playwright-core is not installed (%v): run make build, which runs npm ci in console/", err)
	}
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		t.Fatalf("Debian's chromium is not installed (%v): run make deps-test", err)
	}
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
	defer in.delete(xss.ID)

	// Kept after the test, as its artifacts.
	shots, err := os.MkdirTemp("", "space-console-shots-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", shots)
	cmd := exec.Command("node", "testdata/console/console.mjs")
	cmd.Env = append(os.Environ(), "SPACE_URL="+in.url, "SPACE_KEY="+in.key, "XSS_ID="+xss.ID, "XSS_PAYLOAD="+payload,
		"SHOTS="+shots, "PLAYWRIGHT="+playwright)
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
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("console.mjs printed %q: %v\n%s", out, err, stderr.String())
	}
	t.Logf("console.mjs:\n%s", stderr.String())
	if !res.OK {
		t.Fatalf("console: %s (steps %v)\n%s", strings.Join(res.Problems, "; "), res.Steps, stderr.String())
	}
	// The console's delete reached the server.
	var sb struct {
		State string `json:"state"`
	}
	if code := in.do("GET", "/v1/sandboxes/"+res.ID, nil, &sb); code != http.StatusNotFound && sb.State != "deleting" && sb.State != "deleted" {
		t.Errorf("sandbox %s after the console deleted it: HTTP %d, state %q", res.ID, code, sb.State)
	}
}

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	space "github.com/spacesandbox/space/sdk/go"
)

// TestRunCode drives the code interpreter through SPACE's own API on the ns
// runtime: POST /v1/sandboxes/{id}/code and its contexts through the Go
// SDK and raw REST, and `space run`, against a sandbox of the
// code-interpreter template (built here; its Debian tree is kept in
// $SPACE_TEST_CACHE_DIR, so only a cold cache pays for debootstrap).
func TestRunCode(t *testing.T) {
	in := startServerEnv(t, newDataDir(t), templateCacheEnv())
	defer in.stop()
	in.buildCodeInterpreter(t)
	var sb sandbox
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "code-interpreter", "runtime": "ns", "memory_mib": 1024}, &sb); code != http.StatusCreated {
		t.Fatalf("create: HTTP %d\n%s", code, in.logs())
	}
	defer in.delete(sb.ID)
	c := space.NewClient(in.url, in.key)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := c.WaitForState(ctx, sb.ID, sandboxv1.StateRunning); err != nil {
		t.Fatal(err)
	}
	run := func(code string, opts space.RunCodeOptions) *space.Execution {
		t.Helper()
		ex, err := c.RunCode(ctx, sb.ID, code, opts)
		if err != nil {
			t.Fatalf("RunCode(%q): %v\n%s", code, err, in.logs())
		}
		return ex
	}

	t.Run("sdk", func(t *testing.T) {
		if ex := run("1+1", space.RunCodeOptions{}); ex.Text() != "2" || ex.Error != nil || ex.ExecutionCount < 1 {
			t.Errorf("1+1: text %q, error %+v, count %d", ex.Text(), ex.Error, ex.ExecutionCount)
		}
		run("x = 41", space.RunCodeOptions{})
		if ex := run("x + 1", space.RunCodeOptions{}); ex.Text() != "42" {
			t.Errorf("state across calls: x + 1 = %q", ex.Text())
		}
		var streamed []string
		ex := run("import sys\nprint('out')\nprint('err', file=sys.stderr)", space.RunCodeOptions{OnStdout: func(s string) { streamed = append(streamed, s) }})
		if strings.Join(ex.Logs.Stdout, "") != "out\n" || strings.Join(ex.Logs.Stderr, "") != "err\n" || strings.Join(streamed, "") != "out\n" {
			t.Errorf("logs %+v, streamed %q", ex.Logs, streamed)
		}
		ex = run("def f():\n    raise ValueError('bad value')\nf()", space.RunCodeOptions{})
		if ex.Error == nil || ex.Error.Name != "ValueError" || ex.Error.Value != "bad value" || !strings.Contains(ansi.ReplaceAllString(ex.Error.Traceback, ""), "raise ValueError('bad value')") {
			t.Errorf("error: %+v", ex.Error)
		}
		if ex := run("1+2", space.RunCodeOptions{}); ex.Text() != "3" {
			t.Errorf("the call after an error: %q (error %+v)", ex.Text(), ex.Error)
		}
		ex = run("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()", space.RunCodeOptions{})
		var png []byte
		for _, r := range ex.Results {
			if r.PNG != "" {
				png, _ = base64.StdEncoding.DecodeString(r.PNG)
			}
		}
		if !bytes.HasPrefix(png, []byte("\x89PNG")) {
			t.Errorf("no PNG result: error %+v, %d results", ex.Error, len(ex.Results))
		}
		if ex := run("import os; os.environ.get('SPACE_K')", space.RunCodeOptions{Env: map[string]string{"SPACE_K": "v"}}); ex.Text() != "'v'" {
			t.Errorf("env: %q", ex.Text())
		}
		if ex := run("echo hi from bash", space.RunCodeOptions{Language: "bash"}); strings.Join(ex.Logs.Stdout, "") != "hi from bash\n" {
			t.Errorf("default bash context: %+v", ex.Logs)
		}
	})

	t.Run("latency", func(t *testing.T) {
		// A figure for docs/e2b.md, not an assertion: RunCode("1+1") through
		// REST, the node's port path and the kernel, warm.
		var ds []time.Duration
		for range 20 {
			start := time.Now()
			if ex := run("1+1", space.RunCodeOptions{}); ex.Text() != "2" {
				t.Fatalf("1+1: %q", ex.Text())
			}
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		t.Logf("RunCode(\"1+1\") over %d calls: p50 %v, p90 %v, max %v", len(ds), ds[len(ds)/2], ds[len(ds)*9/10], ds[len(ds)-1])
	})

	t.Run("timeout", func(t *testing.T) {
		run("kept = 5", space.RunCodeOptions{})
		start := time.Now()
		ex := run("import time\nfor i in range(600): time.sleep(0.1)", space.RunCodeOptions{Timeout: 1500 * time.Millisecond})
		if ex.Error == nil || ex.Error.Name != "TimeoutError" {
			t.Errorf("past its timeout: error %+v", ex.Error)
		}
		if ex := run("kept + 1", space.RunCodeOptions{}); ex.Text() != "6" {
			t.Errorf("state after the interrupt: %q (error %+v, logs %+v)", ex.Text(), ex.Error, ex.Logs)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("the call after the timeout waited for the loop: %v", d)
		}
	})

	t.Run("contexts", func(t *testing.T) {
		bc, err := c.CreateCodeContext(ctx, sb.ID, sandboxv1.CodeContextRequest{Language: "bash", Cwd: "/tmp"})
		if err != nil || bc.ID == "" || bc.Language != "bash" || bc.Cwd != "/tmp" {
			t.Fatalf("create a bash context: %+v %v", bc, err)
		}
		run("X=5; cd /", space.RunCodeOptions{Context: bc.ID})
		if ex := run("echo $X $PWD", space.RunCodeOptions{Context: bc.ID}); strings.Join(ex.Logs.Stdout, "") != "5 /\n" {
			t.Errorf("bash state across calls: %+v", ex.Logs)
		}
		if ex := run("false", space.RunCodeOptions{Context: bc.ID}); ex.Error == nil || ex.Error.Name != "ExitCodeError" {
			t.Errorf("bash non-zero status: %+v", ex.Error)
		}
		list, err := c.ListCodeContexts(ctx, sb.ID)
		if err != nil || !hasContext(list, bc.ID) {
			t.Errorf("list: %+v %v", list, err)
		}
		if err := c.RestartCodeContext(ctx, sb.ID, bc.ID); err != nil {
			t.Fatal(err)
		}
		if ex := run("echo ${X:-gone}", space.RunCodeOptions{Context: bc.ID}); strings.Join(ex.Logs.Stdout, "") != "gone\n" {
			t.Errorf("after a restart: %+v", ex.Logs)
		}
		if err := c.DeleteCodeContext(ctx, sb.ID, bc.ID); err != nil {
			t.Fatal(err)
		}
		if list, err := c.ListCodeContexts(ctx, sb.ID); err != nil || hasContext(list, bc.ID) {
			t.Errorf("list after delete: %+v %v", list, err)
		}
		_, err = c.RunCode(ctx, sb.ID, "true", space.RunCodeOptions{Context: bc.ID})
		if ae := (*space.APIError)(nil); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
			t.Errorf("a removed context: %v, want 404", err)
		}
	})

	t.Run("rest", func(t *testing.T) {
		// The raw stream: NDJSON, one event a line, the last "end".
		body, _ := json.Marshal(sandboxv1.CodeRequest{Code: "print('a')\n2*3"})
		req, _ := http.NewRequestWithContext(ctx, "POST", in.url+"/v1/sandboxes/"+sb.ID+"/code", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+in.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("HTTP %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		var types []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev sandboxv1.CodeEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			types = append(types, ev.Type)
		}
		if got := strings.Join(types, ","); got != "execution_count,stdout,result,end" {
			t.Errorf("event types %s", got)
		}
		var e struct{ Message string }
		if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/code", map[string]any{"code": "1", "language": "r"}, &e); code != http.StatusBadRequest || !strings.Contains(e.Message, "not supported") {
			t.Errorf("language r: HTTP %d %q", code, e.Message)
		}
		if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/code", map[string]any{"code": "1", "timeout": "soon"}, &e); code != http.StatusBadRequest || !strings.Contains(e.Message, "timeout") {
			t.Errorf("timeout soon: HTTP %d %q", code, e.Message)
		}
		// A sandbox without an interpreter: 409 naming the template to use.
		plain := in.create("minimal")
		defer in.delete(plain.ID)
		if code := in.do("POST", "/v1/sandboxes/"+plain.ID+"/code", map[string]any{"code": "1+1"}, &e); code != http.StatusConflict || !strings.Contains(e.Message, "code-interpreter template") {
			t.Errorf("minimal sandbox: HTTP %d %q", code, e.Message)
		}
	})

	t.Run("cli", func(t *testing.T) {
		if out, errOut, code := in.cli("", "run", "--sandbox", sb.ID, "1+1"); code != 0 || out != "2\n" {
			t.Errorf("space run 1+1: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		if out, errOut, code := in.cli("print(6*7)", "run", "--sandbox", sb.ID, "-"); code != 0 || out != "42\n" {
			t.Errorf("space run -: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		if out, errOut, code := in.cli("", "run", "--sandbox", sb.ID, "raise ValueError('nope')"); code != 1 || !strings.Contains(errOut, "ValueError: nope") {
			t.Errorf("space run of an error: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		if out, errOut, code := in.cli("", "run", "--sandbox", sb.ID, "--lang", "bash", "echo hi; echo oops >&2"); code != 0 || out != "hi\n" || !strings.Contains(errOut, "oops") {
			t.Errorf("space run --lang bash: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		before, err := c.ListSandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if out, errOut, code := in.cli("", "run", "--runtime", "ns", "1+1"); code != 0 || out != "2\n" {
			t.Errorf("space run in a new sandbox: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		after, err := c.ListSandboxes(ctx)
		if err != nil || len(after) != len(before) {
			t.Errorf("space run left its sandbox: %d sandboxes before, %d after (%v)", len(before), len(after), err)
		}
	})
}

// ansi matches the colour escapes of IPython's tracebacks (as on E2B).
var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

func hasContext(list []sandboxv1.CodeContext, id string) bool {
	for _, c := range list {
		if c.ID == id {
			return true
		}
	}
	return false
}

// templateCacheEnv points a server's template cache at make test's
// ($SPACE_TEST_CACHE_DIR), so the Debian trees are debootstrapped once.
func templateCacheEnv() []string {
	if cache := os.Getenv("SPACE_TEST_CACHE_DIR"); cache != "" {
		return []string{"SPACE_CACHE_DIR=" + cache}
	}
	return nil
}

// buildCodeInterpreter builds the code-interpreter template on the server
// and waits until it is ready.
func (in *instance) buildCodeInterpreter(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Fatal("debootstrap is not installed (scripts/deps.sh test installs it)")
	}
	if out, errOut, code := in.cli("", "template", "build", "code-interpreter", "--from", "builtin:code-interpreter"); code != 0 {
		t.Fatalf("space template build code-interpreter: exit %d\n%s\n%s\n%s", code, out, errOut, in.logs())
	}
	in.waitTemplate("code-interpreter")
}

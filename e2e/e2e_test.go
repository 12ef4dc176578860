package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// newDataDir returns a data directory whose leftovers (mounts, processes) are
// checked when the test ends.
func newDataDir(t *testing.T) string {
	dir := t.TempDir()
	t.Cleanup(func() { checkNoLeftovers(t, dir) })
	return dir
}

// checkNoLeftovers fails when anything of dir is still mounted or running.
func checkNoLeftovers(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mounts := mountsUnder(dir)
		procs := processesMentioning(dir)
		if len(mounts) == 0 && len(procs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("left behind under %s:\nmounts: %v\nprocesses: %v", dir, mounts, procs)
			reclaim(t, dir)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func mountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir) {
			out = append(out, f[4])
		}
	}
	return out
}

func processesMentioning(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(dir)) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

func TestCreateExecFilesDelete(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()

	// CLI: create prints the id alone.
	out, errOut, code := in.cli("", "sandbox", "create", "--template", "minimal", "--runtime", "ns")
	if code != 0 {
		t.Fatalf("sandbox create: exit %d: %s\n%s", code, errOut, in.logs())
	}
	id := strings.TrimSpace(out)
	if strings.ContainsAny(id, " \n") || id == "" {
		t.Fatalf("sandbox create printed %q, want the id alone", out)
	}
	var sb sandbox
	if code := in.do("GET", "/v1/sandboxes/"+id, nil, &sb); code != 200 || sb.State != "running" || sb.Runtime != "ns" || sb.Generation != 1 || sb.Node == "" {
		t.Fatalf("GET sandbox: HTTP %d %+v", code, sb)
	}

	// Exec: run to completion, exit codes, stdin, env and cwd.
	res := in.exec(id, "sh", "-c", "echo out; echo err >&2; exit 3")
	if res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" {
		t.Errorf("exec = %+v, want exit 3, out, err", res)
	}
	var withStdin execResult
	in.do("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": []string{"cat"}, "stdin": "piped"}, &withStdin)
	if withStdin.Stdout != "piped" {
		t.Errorf("exec with stdin = %+v, want piped", withStdin)
	}
	// Regression: proxies flushed response headers before forwarding the
	// request body, which cut about one stream in a hundred.
	for i := range 100 {
		var r execResult
		if code := in.do("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": []string{"cat"}, "stdin": "x"}, &r); code != 200 || r.Stdout != "x" {
			t.Fatalf("stdin exec %d: HTTP %d %+v", i, code, r)
		}
	}
	var withEnv execResult
	in.do("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": []string{"sh", "-c", "echo $FOO; pwd"}, "env": map[string]string{"FOO": "bar"}, "cwd": "/tmp"}, &withEnv)
	if withEnv.Stdout != "bar\n/tmp\n" {
		t.Errorf("exec with env and cwd = %+v", withEnv)
	}
	if res := in.exec(id, "no-such-command"); res.ExitCode != 127 || res.Stderr == "" {
		t.Errorf("missing command: %+v, want exit 127 with a message", res)
	}

	// CLI exec streams and returns the exit code.
	out, _, code = in.cli("hello from stdin", "exec", id, "--", "sh", "-c", "cat; echo; exit 5")
	if code != 5 || out != "hello from stdin\n" {
		t.Errorf("space exec: exit %d out %q, want 5 and the echoed stdin", code, out)
	}

	// Files through the CLI: write from stdin, read back, list, move, remove.
	if _, e, c := in.cli("file body", "files", "write", id, "/home/user/a.txt"); c != 0 {
		t.Fatalf("files write: %d %s", c, e)
	}
	if out, e, c := in.cli("", "files", "read", id, "/home/user/a.txt"); c != 0 || out != "file body" {
		t.Errorf("files read: %d %q %s", c, out, e)
	}
	if out, _, c := in.cli("", "files", "ls", id, "/home/user"); c != 0 || !strings.Contains(out, "a.txt") {
		t.Errorf("files ls: %d %q", c, out)
	}
	if _, e, c := in.cli("", "files", "mv", id, "/home/user/a.txt", "/home/user/b.txt"); c != 0 {
		t.Errorf("files mv: %d %s", c, e)
	}
	if _, e, c := in.cli("", "files", "rm", id, "/home/user/b.txt"); c != 0 {
		t.Errorf("files rm: %d %s", c, e)
	}
	if _, _, c := in.cli("", "files", "read", id, "/home/user/b.txt"); c != 1 {
		t.Errorf("reading a removed file: exit %d, want 1", c)
	}

	// The sandbox is isolated: it sees only its own processes and not the host's files.
	if res := in.exec(id, "sh", "-c", "ls /proc | grep -c '^[0-9]'"); strings.TrimSpace(res.Stdout) == "" {
		t.Errorf("ps in sandbox: %+v", res)
	}
	if res := in.exec(id, "sh", "-c", "test -e "+in.dataDir+" && echo visible || echo hidden"); res.Stdout != "hidden\n" {
		t.Errorf("host data dir from inside the sandbox: %q, want hidden", res.Stdout)
	}

	// The node refuses guest traffic without a capability for this
	// execution, even with the node token.
	matches, _ := filepath.Glob(filepath.Join(in.dataDir, "node", "execs", id+"-*"))
	if len(matches) != 1 {
		t.Fatalf("runtime record of %s: %v", id, matches)
	}
	token, _ := os.ReadFile(filepath.Join(in.dataDir, "node.token"))
	nodeHTTP := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(in.dataDir, "run", "node.sock"))
	}}}
	for _, tc := range []struct{ capHeader string }{{""}, {"AQ"}} {
		req, _ := http.NewRequest("GET", "http://node/node/v1/executions/"+filepath.Base(matches[0])+"/guest/envs", nil)
		req.Header.Set("X-Space-Node-Token", strings.TrimSpace(string(token)))
		if tc.capHeader != "" {
			req.Header.Set("X-Space-Capability", tc.capHeader)
		}
		resp, err := nodeHTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("guest request with capability %q: HTTP %d, want 403", tc.capHeader, resp.StatusCode)
		}
	}

	// Delete: gone for GET and list.
	if _, e, c := in.cli("", "sandbox", "delete", id); c != 0 {
		t.Fatalf("sandbox delete: %d %s", c, e)
	}
	if code := in.do("GET", "/v1/sandboxes/"+id, nil, nil); code != http.StatusNotFound {
		t.Errorf("GET after delete: HTTP %d, want 404", code)
	}
}

func TestConcurrentCreates(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	const n = 20
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sb struct {
				sandbox
				Message string `json:"message"`
			}
			if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 128}, &sb); code != http.StatusCreated {
				t.Errorf("create %d: HTTP %d %s", i, code, sb.Message)
				return
			}
			ids[i] = sb.ID
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" {
			continue
		}
		if seen[id] {
			t.Errorf("id %s handed out twice", id)
		}
		seen[id] = true
		if res := in.exec(id, "hostname"); strings.TrimSpace(res.Stdout) != id {
			t.Errorf("hostname in %s = %q", id, res.Stdout)
		}
	}
	var list struct{ Sandboxes []sandbox }
	in.do("GET", "/v1/sandboxes", nil, &list)
	if len(list.Sandboxes) != len(seen) {
		t.Errorf("list has %d sandboxes, want %d", len(list.Sandboxes), len(seen))
	}
	for id := range seen {
		in.delete(id)
	}
}

// TestRestartKeepsSandboxes restarts the whole server (control plane, node
// services, node-manager) and expects running sandboxes to keep running,
// processes and all, reattached through their host bridges.
func TestRestartKeepsSandboxes(t *testing.T) {
	dir := newDataDir(t)
	in := startServer(t, dir)
	runtimes := []string{"ns"}
	if _, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		runtimes = append(runtimes, "vm")
	}
	var sbs []sandbox
	before := map[string]string{}
	for _, rt := range runtimes {
		sb := in.createWith("minimal", rt)
		if res := in.exec(sb.ID, "sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"); res.ExitCode != 0 {
			t.Fatalf("%s: background sleep: %+v", rt, res)
		}
		in.exec(sb.ID, "sh", "-c", "echo kept > /tmp/marker")
		before[sb.ID] = in.exec(sb.ID, "sh", "-c", "pidof sleep").Stdout
		sbs = append(sbs, sb)
	}

	in.kill() // a crash, not a clean stop
	in = startServer(t, dir)
	defer in.stop()

	for _, sb := range sbs {
		var got sandbox
		if code := in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got); code != 200 || got.State != "running" || got.Generation != sb.Generation {
			t.Fatalf("%s after restart: HTTP %d %+v, want running generation %d\n%s", sb.Runtime, code, got, sb.Generation, in.logs())
		}
		if res := in.exec(sb.ID, "cat", "/tmp/marker"); res.Stdout != "kept\n" {
			t.Errorf("%s: marker after restart = %+v", sb.Runtime, res)
		}
		if after := in.exec(sb.ID, "sh", "-c", "pidof sleep"); after.Stdout != before[sb.ID] || after.Stdout == "" {
			t.Errorf("%s: background process: before %q, after %q", sb.Runtime, before[sb.ID], after.Stdout)
		}
		in.delete(sb.ID)
	}
}

func TestTenantsAndBadInput(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	sb := in.create("minimal")
	defer in.delete(sb.ID)

	// Another tenant sees 404 for the first tenant's sandbox, as for a missing one.
	out, e, c := in.cli("", "tenant", "create", "other")
	if c != 0 {
		t.Fatalf("tenant create: %d %s", c, e)
	}
	otherKey := strings.TrimSpace(out)
	for _, p := range []string{"/v1/sandboxes/" + sb.ID, "/v1/sandboxes/aaaaaaaaaaaaaaaaaaaa"} {
		if code := in.doKey(otherKey, "GET", p, nil, nil); code != http.StatusNotFound {
			t.Errorf("other tenant GET %s: HTTP %d, want 404", p, code)
		}
	}
	if code := in.doKey(otherKey, "POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"true"}}, nil); code != http.StatusNotFound {
		t.Errorf("other tenant exec: HTTP %d, want 404", code)
	}
	var list struct{ Sandboxes []sandbox }
	in.doKey(otherKey, "GET", "/v1/sandboxes", nil, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("other tenant lists %d sandboxes, want 0", len(list.Sandboxes))
	}
	if code := in.doKey("space_k-aaaaaaaaaaaaaaaa_"+strings.Repeat("0", 64), "GET", "/v1/sandboxes", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("unknown key: HTTP %d, want 401", code)
	}

	// A revoked key is refused at once.
	out, e, c = in.cli("", "key", "create")
	if c != 0 {
		t.Fatalf("key create: %d %s", c, e)
	}
	newKey := strings.TrimSpace(out)
	if code := in.doKey(newKey, "GET", "/v1/sandboxes", nil, nil); code != 200 {
		t.Fatalf("new key: HTTP %d", code)
	}
	keyID := strings.SplitN(strings.TrimPrefix(newKey, "space_"), "_", 2)[0]
	if _, e, c := in.cli("", "key", "revoke", keyID); c != 0 {
		t.Fatalf("key revoke: %d %s", c, e)
	}
	if code := in.doKey(newKey, "GET", "/v1/sandboxes", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("revoked key: HTTP %d, want 401", code)
	}

	bad := []struct {
		name, method, path string
		body               any
		want               int
	}{
		{"malformed JSON", "POST", "/v1/sandboxes", []byte("{not json"), 400},
		{"unknown field", "POST", "/v1/sandboxes", map[string]any{"template": "minimal", "bogus": 1}, 400},
		{"huge body", "POST", "/v1/sandboxes", bytes.Repeat([]byte("x"), 2<<20), 413},
		{"unknown template", "POST", "/v1/sandboxes", map[string]any{"template": "nope"}, 400},
		{"bad memory", "POST", "/v1/sandboxes", map[string]any{"template": "minimal", "memory_mib": -1}, 400},
		{"unknown sandbox", "GET", "/v1/sandboxes/zzzzzzzzzzzzzzzzzzzz", nil, 404},
		{"bad sandbox id", "GET", "/v1/sandboxes/..%2f..%2fetc", nil, 404},
		{"empty cmd", "POST", "/v1/sandboxes/" + sb.ID + "/exec", map[string]any{"cmd": []string{}}, 400},
		{"NUL in cmd", "POST", "/v1/sandboxes/" + sb.ID + "/exec", map[string]any{"cmd": []string{"echo", "a\x00b"}}, 400},
		{"NUL in path", "GET", "/v1/sandboxes/" + sb.ID + "/files?path=/etc/pass%00wd", nil, 400},
		{"missing path", "GET", "/v1/sandboxes/" + sb.ID + "/files", nil, 400},
		{"missing file", "GET", "/v1/sandboxes/" + sb.ID + "/files?path=/nope", nil, 404},
		{"port 0", "POST", "/v1/sandboxes/" + sb.ID + "/ports", map[string]any{"port": 0}, 400},
		{"port protocol", "POST", "/v1/sandboxes/" + sb.ID + "/ports", map[string]any{"port": 8080, "protocol": "udp"}, 400},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			var e struct{ Code, Message string }
			if code := in.do(tc.method, tc.path, tc.body, &e); code != tc.want || e.Code == "" || e.Message == "" {
				t.Errorf("HTTP %d %+v, want %d with code and message", code, e, tc.want)
			}
		})
	}

	// A symlink pointing out of the sandbox resolves inside it: the host file
	// is never read.
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("host only"), 0o600); err != nil {
		t.Fatal(err)
	}
	in.exec(sb.ID, "ln", "-s", secret, "/home/user/escape")
	if code := in.do("GET", "/v1/sandboxes/"+sb.ID+"/files?path=/home/user/escape", nil, nil); code != 404 {
		t.Errorf("reading a symlink to a host file: HTTP %d, want 404", code)
	}
	// The server is still fine after all of it.
	if res := in.exec(sb.ID, "echo", "alive"); res.Stdout != "alive\n" {
		t.Errorf("after bad input: %+v", res)
	}
}

// TestSandboxDeathIsReported kills a sandbox from the host in the middle of an
// exec: the exec gets a clear error, the death is recorded with its reason,
// the sandbox comes back from its own disk as it died (an ns sandbox's
// volume outlives its processes) with what it wrote before, the server keeps
// serving, and delete still cleans up.
func TestSandboxDeathIsReported(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	sb := in.create("minimal")
	other := in.create("minimal")
	defer in.delete(other.ID)

	in.exec(sb.ID, "sh", "-c", "echo before-death > /home/user/written")
	pid := sandboxPid(t, in.dataDir, sb.ID)
	done := make(chan int, 1)
	go func() {
		var e struct{ Code, Message string }
		code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"sleep", "60"}}, &e)
		t.Logf("exec in dying sandbox: HTTP %d %+v", code, e)
		done <- code
	}()
	time.Sleep(500 * time.Millisecond)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill sandbox init %d: %v", pid, err)
	}
	select {
	case code := <-done:
		if code < 500 {
			t.Errorf("exec in a dying sandbox: HTTP %d, want 5xx", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("exec still waiting 30s after its sandbox died")
	}
	deadline := time.Now().Add(time.Minute)
	var got sandbox
	for time.Now().Before(deadline) {
		in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
		if got.State == "failed" || got.State == "running" && got.Generation == sb.Generation+1 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got.State != "running" || got.Generation != sb.Generation+1 {
		t.Fatalf("dead sandbox: %+v, want running again at generation %d (recovered from its disk)\n%s", got, sb.Generation+1, in.logs())
	}
	if out, _, _ := in.cli("", "sandbox", "events", sb.ID); !strings.Contains(out, "recovering") || !strings.Contains(out, "died") || !strings.Contains(out, "its disk as it died") {
		t.Errorf("the death is not reported with its reason and what the sandbox came back from:\n%s", out)
	}
	if res := in.exec(sb.ID, "cat", "/home/user/written"); res.Stdout != "before-death\n" {
		t.Errorf("after recovery: a file written before the death reads %+v", res)
	}
	if res := in.exec(other.ID, "echo", "unaffected"); res.Stdout != "unaffected\n" {
		t.Errorf("the other sandbox: %+v", res)
	}
	in.delete(sb.ID)
}

// sandboxPid reads the host pid of a sandbox's init from the node's runtime record.
func sandboxPid(t *testing.T, dataDir, id string) int {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(dataDir, "node", "execs", id+"-*", "record.json"))
	if len(matches) != 1 {
		t.Fatalf("runtime records of %s: %v", id, matches)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		SandboxPid int `json:"sandbox_pid"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.SandboxPid <= 1 {
		t.Fatalf("record %s: %v %+v", matches[0], err, rec)
	}
	return rec.SandboxPid
}

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestUniquenessAfterRestore is catalogue item A-7 on the ns runtime:
// racing restores of one hibernated sandbox bring up exactly one
// execution (generation+1, one execution directory on the node) — every
// request either joins that activation or is refused with a 409, none
// starts a second; racing forks of one snapshot give distinct sandboxes,
// each with its own execution, its own /dev/urandom stream and its own
// E2B envd access token, which opens no other fork.
func TestUniquenessAfterRestore(t *testing.T) {
	dir := newDataDir(t)
	in := startServer(t, dir)
	defer in.stop()
	sb := in.create("minimal")
	defer in.delete(sb.ID)
	in.exec(sb.ID, "sh", "-c", "echo kept > /home/user/kept")
	if out, e, c := in.cli("", "sandbox", "hibernate", sb.ID); c != 0 {
		t.Fatalf("hibernate: exit %d %s %s\n%s", c, out, e, in.logs())
	}
	var hib sandbox
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &hib)
	if hib.State != "hibernated" || len(execDirs(dir)) != 0 {
		t.Fatalf("after hibernate: %+v, execution dirs %v", hib, execDirs(dir))
	}

	// T1: racing restores.
	const racers = 4
	type answer struct {
		code int
		body string
	}
	answers := make([]answer, racers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code, body := post(in, "/v1/sandboxes/"+sb.ID+"/restore", "")
			answers[i] = answer{code, body}
		}()
	}
	close(start)
	wg.Wait()
	ok := 0
	for i, a := range answers {
		switch {
		case a.code < 300:
			ok++
		case a.code == http.StatusConflict:
		default:
			t.Errorf("restore %d: HTTP %d %.300s, want 2xx (joined) or 409", i, a.code, a.body)
		}
	}
	t.Logf("%d racing restores: %d joined the activation, %d refused with 409", racers, ok, racers-ok)
	if ok == 0 {
		t.Fatalf("no restore succeeded: %+v\n%s", answers, in.logs())
	}
	var got sandbox
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
	if got.State != "running" || got.Generation != hib.Generation+1 {
		t.Errorf("after %d racing restores: %+v, want running at generation %d (one activation)", racers, got, hib.Generation+1)
	}
	if dirs := execDirs(dir); len(dirs) != 1 {
		t.Errorf("after %d racing restores the node has %d executions %v, want 1", racers, len(dirs), dirs)
	}
	if res := in.exec(sb.ID, "cat", "/home/user/kept"); res.Stdout != "kept\n" {
		t.Errorf("after the racing restores: %+v", res)
	}
	// A restore of a running sandbox changes nothing.
	if code, body := post(in, "/v1/sandboxes/"+sb.ID+"/restore", ""); code >= 300 && code != http.StatusConflict {
		t.Errorf("restore again: HTTP %d %.300s", code, body)
	}
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
	if got.Generation != hib.Generation+1 || len(execDirs(dir)) != 1 {
		t.Errorf("a restore of the running sandbox: %+v, %d executions; want generation %d, 1 execution", got, len(execDirs(dir)), hib.Generation+1)
	}

	// Racing forks of one snapshot.
	var snap snapshotJSON
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", nil, &snap); code != http.StatusCreated {
		t.Fatalf("snapshot: HTTP %d %+v", code, snap)
	}
	forks := make([]sandbox, 2)
	codes := make([]int, 2)
	start = make(chan struct{})
	for i := range forks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			codes[i] = in.do("POST", "/v1/sandboxes/"+sb.ID+"/fork", map[string]any{"snapshot": snap.ID}, &forks[i])
		}()
	}
	close(start)
	wg.Wait()
	for i, f := range forks {
		if codes[i] != http.StatusCreated || f.State != "running" {
			t.Fatalf("fork %d: HTTP %d %+v\n%s", i, codes[i], f, in.logs())
		}
		defer in.delete(f.ID)
	}
	if forks[0].ID == forks[1].ID || forks[0].ID == sb.ID {
		t.Fatalf("racing forks: %s and %s of %s, want two new sandboxes", forks[0].ID, forks[1].ID, sb.ID)
	}
	if dirs := execDirs(dir); len(dirs) != 3 {
		t.Errorf("parent and two forks: %d executions %v, want 3", len(dirs), dirs)
	}

	// T2: /dev/urandom differs between the forks (and the parent). On ns
	// the kernel, and so its RNG, is the node's: this holds without any
	// reseed; TestVMUniquenessAfterRestore checks the vm runtime's.
	random := map[string]string{}
	for _, id := range []string{sb.ID, forks[0].ID, forks[1].ID} {
		res := in.exec(id, "sh", "-c", "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'")
		if res.ExitCode != 0 || len(res.Stdout) != 64 {
			t.Fatalf("urandom in %s: %+v", id, res)
		}
		if other, seen := random[res.Stdout]; seen {
			t.Errorf("%s and %s read the same /dev/urandom bytes %s", other, id, res.Stdout)
		}
		random[res.Stdout] = id
	}

	// Guest-held tokens: each fork's envd access token opens that fork
	// only.
	tokens := map[string]string{}
	for _, id := range []string{sb.ID, forks[0].ID, forks[1].ID} {
		tokens[id] = e2bToken(t, in, id)
	}
	for _, target := range []string{sb.ID, forks[0].ID, forks[1].ID} {
		for holder, tok := range tokens {
			code, body := envdStat(in, target, tok)
			if want := holder == target; want != (code == http.StatusOK) {
				t.Errorf("envd Stat on %s with %s's token: HTTP %d %.200s, want success %v", target, holder, code, body, want)
			}
		}
	}
}

// execDirs are the execution directories on dir's node: one per live
// execution.
func execDirs(dir string) []string {
	var out []string
	dirs, _ := filepath.Glob(filepath.Join(dir, "node", "execs", "*"))
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, filepath.Base(d))
		}
	}
	return out
}

// post sends an authenticated POST with a JSON body and returns the
// status and body.
func post(in *instance, path, body string) (int, string) {
	req, _ := http.NewRequest("POST", in.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+in.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// e2bToken is sandbox id's envdAccessToken as E2B's connect answers it.
func e2bToken(t *testing.T, in *instance, id string) string {
	t.Helper()
	var got struct {
		Token string `json:"envdAccessToken"`
	}
	if code := in.do("POST", "/e2b/sandboxes/"+id+"/connect", map[string]any{"timeout": 300}, &got); code >= 300 || got.Token == "" {
		t.Fatalf("E2B connect %s: HTTP %d", id, code)
	}
	return got.Token
}

// envdStat calls envd's Filesystem/Stat of / in sandbox id with token.
func envdStat(in *instance, id, token string) (int, string) {
	req, _ := http.NewRequest("POST", in.url+"/filesystem.Filesystem/Stat", strings.NewReader(`{"path":"/"}`))
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Access-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Sprint(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

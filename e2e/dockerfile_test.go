package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDockerfileBuild builds a template on ns from a Dockerfile (FROM
// minimal, ENV, WORKDIR, COPY of a file and a directory, RUN, CMD) and checks
// that a sandbox from it sees the files, the env and the directory, and that
// its start command ran; that a failing RUN fails the build with its line and
// exit code, and a refused instruction with its line number; and the step
// cache: a rebuild with nothing changed is all cached, one after a COPY'd
// file changed reruns from that COPY and has the new file, --no-cache reruns
// all, only stopped cache holders with their named snapshots are left (3
// per name), another tenant sees none of it, and prune removes them.
func TestDockerfileBuild(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()

	dir := t.TempDir()
	files := map[string]string{
		"hello.txt":     "hello from the context\n",
		"tools/tool.sh": "#!/bin/sh\necho tool ran\n",
		"Dockerfile": `FROM minimal
ENV GREETING=hello
WORKDIR /app
COPY hello.txt ./
COPY tools /app/tools/
RUN echo "$GREETING from RUN in $(pwd)" > ran.txt && chmod 755 /app/tools/tool.sh
CMD ["/bin/sh", "-c", "echo started > /tmp/started; exec sleep 100000"]
`,
		// A step is cached before the failing one: a failed build keeps
		// no holder all the same.
		"Dockerfile.fail":    "FROM minimal\nRUN echo ok > /ok\nRUN echo about to fail; exit 7\n",
		"Dockerfile.refused": "FROM minimal\nRUN true\nHEALTHCHECK CMD true\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	_, stderr, code := in.cli("", "template", "build", "dfapp", "--dockerfile", filepath.Join(dir, "Dockerfile"), "--context", dir, "--build-runtime", "ns")
	if code != 0 {
		t.Fatalf("dockerfile build: exit %d\n%s\n%s", code, stderr, in.logs())
	}
	t.Logf("dockerfile build took %s; its log:\n%s", time.Since(began).Round(time.Millisecond), stderr)
	for _, want := range []string{"step 1/6: ENV GREETING hello", "step 6/6: CMD [\"/bin/sh\",\"-c\""} {
		if !strings.Contains(stderr, want) {
			t.Errorf("build log lacks %q:\n%s", want, stderr)
		}
	}
	sb := in.createWith("dfapp", "ns")
	if res := in.exec(sb.ID, "cat", "/app/hello.txt", "/app/ran.txt"); res.Stdout != "hello from the context\nhello from RUN in /app\n" {
		t.Errorf("files in a sandbox from the template: %+v", res)
	}
	if res := in.exec(sb.ID, "sh", "-c", `echo "$GREETING|$(pwd)"; /app/tools/tool.sh; cat /tmp/started`); res.Stdout != "hello|/app\ntool ran\nstarted\n" {
		t.Errorf("env, workdir, copied directory and start command: %+v", res)
	}

	_, stderr, code = in.cli("", "template", "build", "dffail", "--dockerfile", filepath.Join(dir, "Dockerfile.fail"), "--context", dir, "--build-runtime", "ns")
	if code == 0 || !strings.Contains(stderr, "line 3") || !strings.Contains(stderr, "exit code 7") || !strings.Contains(stderr, "about to fail") {
		t.Errorf("failing RUN: exit %d, want the line, exit code 7 and its output:\n%s", code, stderr)
	}
	_, stderr, code = in.cli("", "template", "build", "dfrefused", "--dockerfile", filepath.Join(dir, "Dockerfile.refused"), "--context", dir, "--build-runtime", "ns")
	if code == 0 || !strings.Contains(stderr, "line 3") || !strings.Contains(stderr, "HEALTHCHECK") {
		t.Errorf("refused instruction: exit %d, want line 3 and HEALTHCHECK:\n%s", code, stderr)
	}
	// A template in use is not replaced: the rebuilds delete it first.
	in.delete(sb.ID)
	in.waitGone(sb.ID)
	// Only the first build's cache holder is left: the failed builds left
	// nothing.
	holders := in.wantOnlyHolders()
	if len(holders) != 1 {
		t.Fatalf("after one successful build: %d cache holders, want 1", len(holders))
	}
	// WORKDIR, COPY, COPY, RUN: one named snapshot each.
	if snaps := in.cacheSnapshots(holders[0]); len(snaps) != 4 {
		t.Errorf("the holder's cached steps: %v, want 4", snaps)
	}

	build := func(args ...string) string {
		t.Helper()
		if _, e, c := in.cli("", "template", "delete", "dfapp"); c != 0 {
			t.Fatalf("template delete dfapp: exit %d: %s", c, e)
		}
		began := time.Now()
		args = append([]string{"template", "build", "dfapp", "--dockerfile", filepath.Join(dir, "Dockerfile"), "--context", dir, "--build-runtime", "ns"}, args...)
		_, stderr, code := in.cli("", args...)
		if code != 0 {
			t.Fatalf("space %v: exit %d\n%s\n%s", args, code, stderr, in.logs())
		}
		t.Logf("space %v took %s", args[2:], time.Since(began).Round(time.Millisecond))
		return stderr
	}
	wantCached := func(what, log string, cached ...int) {
		t.Helper()
		for i := 1; i <= 6; i++ {
			want := slices.Contains(cached, i)
			if got := strings.Contains(log, fmt.Sprintf("step %d/6: cached: ", i)); got != want {
				t.Errorf("%s: step %d cached %v, want %v; log:\n%s", what, i, got, want, log)
			}
		}
	}
	wantCached("no-change rebuild", build(), 1, 2, 3, 4, 5, 6)
	if n := len(in.wantOnlyHolders()); n != 1 {
		t.Errorf("a rebuild that cached nothing new: %d holders, want 1", n)
	}

	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCached("rebuild after hello.txt changed", build(), 1, 2)
	sb2 := in.createWith("dfapp", "ns")
	if res := in.exec(sb2.ID, "cat", "/app/hello.txt", "/app/ran.txt"); res.Stdout != "changed\nhello from RUN in /app\n" {
		t.Errorf("after the one-change rebuild, a sandbox sees %+v", res)
	}
	in.delete(sb2.ID)
	in.waitGone(sb2.ID)
	wantCached("--no-cache", build("--no-cache"))

	// Another tenant sees none of the cache and naming its own snapshot
	// with a cached step's name leaves mine alone.
	out, e, c := in.cli("", "tenant", "create", "dfother")
	if c != 0 {
		t.Fatalf("tenant create: %d %s", c, e)
	}
	otherKey := strings.TrimSpace(out)
	var otherList struct{ Sandboxes []sandbox }
	in.doKey(otherKey, "GET", "/v1/sandboxes", nil, &otherList)
	if len(otherList.Sandboxes) != 0 {
		t.Errorf("another tenant lists %d sandboxes, want none of my cache", len(otherList.Sandboxes))
	}
	holders = in.wantOnlyHolders()
	if len(holders) != 3 {
		t.Fatalf("after the builds: %d holders, want 3", len(holders))
	}
	// A fourth holder: the oldest goes, 3 are kept per template name.
	build("--no-cache")
	kept := in.wantOnlyHolders()
	if len(kept) != 3 || slices.Contains(kept, holders[0]) || kept[1] != holders[2] {
		t.Errorf("after a fourth cached build: holders %v, want the newest 3 (were %v and a new one)", kept, holders)
	}
	holders = kept
	mine := in.cacheSnapshots(holders[len(holders)-1])
	var theirs sandbox
	if c := in.doKey(otherKey, "POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256}, &theirs); c != http.StatusCreated {
		t.Fatalf("other tenant create: HTTP %d", c)
	}
	if c := in.doKey(otherKey, "POST", "/v1/sandboxes/"+theirs.ID+"/snapshots", map[string]any{"name": mine[0]}, nil); c >= 300 {
		t.Errorf("other tenant names its snapshot %s: HTTP %d, want it to be its own name", mine[0], c)
	}
	if again := in.cacheSnapshots(holders[len(holders)-1]); !slices.Equal(again, mine) {
		t.Errorf("after another tenant used name %s: my cache %v, was %v", mine[0], again, mine)
	}
	in.doKey(otherKey, "DELETE", "/v1/sandboxes/"+theirs.ID, nil, nil)

	if out, e, c := in.cli("", "template", "cache", "list"); c != 0 || strings.Count(out, "dfapp") != 3 {
		t.Errorf("template cache list: exit %d, want 3 dfapp holders:\n%s%s", c, out, e)
	}
	if _, e, c := in.cli("", "template", "cache", "prune"); c != 0 {
		t.Fatalf("template cache prune: exit %d: %s", c, e)
	}
	for _, h := range holders {
		in.waitGone(h)
	}
	if n := len(in.wantOnlyHolders()); n != 0 {
		t.Errorf("after prune: %d holders, want none", n)
	}
}

// TestDockerfileBuildArg: --build-arg sets an ARG, which RUN sees.
func TestDockerfileBuildArg(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	dir := t.TempDir()
	df := filepath.Join(dir, "Dockerfile")
	if err := os.WriteFile(df, []byte("FROM minimal\nARG WHO=nobody\nRUN echo \"$WHO\" > /who\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, e, c := in.cli("", "template", "build", "dfarg", "--dockerfile", df, "--context", dir, "--build-arg", "WHO=me", "--build-runtime", "ns"); c != 0 {
		t.Fatalf("build: exit %d\n%s", c, e)
	}
	sb := in.createWith("dfarg", "ns")
	defer in.delete(sb.ID)
	if res := in.exec(sb.ID, "cat", "/who"); res.Stdout != "me\n" {
		t.Errorf("/who: %+v, want me", res)
	}
	in.cli("", "template", "cache", "prune")
}

// wantOnlyHolders lists the sandboxes left: apart from keep, each must be
// a stopped Dockerfile cache holder; it returns their ids, oldest first.
func (in *instance) wantOnlyHolders(keep ...string) []string {
	in.t.Helper()
	var list struct {
		Sandboxes []struct {
			sandbox
			Metadata  map[string]string `json:"metadata"`
			CreatedAt time.Time         `json:"created_at"`
		} `json:"sandboxes"`
	}
	if c := in.do("GET", "/v1/sandboxes", nil, &list); c != http.StatusOK {
		in.t.Fatalf("list sandboxes: HTTP %d", c)
	}
	slices.SortFunc(list.Sandboxes, func(a, b struct {
		sandbox
		Metadata  map[string]string `json:"metadata"`
		CreatedAt time.Time         `json:"created_at"`
	}) int {
		return a.CreatedAt.Compare(b.CreatedAt)
	})
	var holders []string
	for _, s := range list.Sandboxes {
		switch {
		case slices.Contains(keep, s.ID) || s.State == "deleted":
		case s.Metadata["dockerfile-cache"] != "" && s.State == "stopped":
			holders = append(holders, s.ID)
		default:
			in.t.Errorf("a build left sandbox %s (%s, %v) behind", s.ID, s.State, s.Metadata)
		}
	}
	return holders
}

// cacheSnapshots is the names of holder id's snapshots; each must be a
// cached step's (dfc-…), no other snapshot left.
func (in *instance) cacheSnapshots(id string) []string {
	in.t.Helper()
	var list struct {
		Snapshots []struct {
			ID    string   `json:"id"`
			Tier  string   `json:"tier"`
			Names []string `json:"names"`
		} `json:"snapshots"`
	}
	if c := in.do("GET", "/v1/sandboxes/"+id+"/snapshots", nil, &list); c != http.StatusOK {
		in.t.Fatalf("list snapshots of %s: HTTP %d", id, c)
	}
	var names []string
	for _, s := range list.Snapshots {
		if s.Tier != "manual" {
			continue // the stop's own
		}
		if len(s.Names) == 0 {
			in.t.Errorf("holder %s keeps unnamed snapshot %s", id, s.ID)
		}
		for _, n := range s.Names {
			if !strings.HasPrefix(n, "dfc-") {
				in.t.Errorf("holder %s snapshot %s named %s, want dfc-…", id, s.ID, n)
			}
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// TestDockerfileCacheOutsideQuota: the step cache's holders are stopped
// sandboxes, which the tenant's quota does not count: with a quota of one
// running sandbox a tenant holding cached builds rebuilds (from a cached
// step, and with new steps), and a build refused because another sandbox
// runs says what a build counts.
func TestDockerfileCacheOutsideQuota(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	dir := t.TempDir()
	df := filepath.Join(dir, "Dockerfile")
	os.WriteFile(filepath.Join(dir, "f"), []byte("one\n"), 0o644)
	if err := os.WriteFile(df, []byte("FROM minimal\nRUN echo built > /built\nCOPY f /f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(name string) (string, int) {
		t.Helper()
		_, stderr, code := in.cli("", "template", "build", name, "--dockerfile", df, "--context", dir)
		return stderr, code
	}
	if log, code := build("dfq"); code != 0 {
		t.Fatalf("first build: exit %d\n%s\n%s", code, log, in.logs())
	}
	holders := in.wantOnlyHolders()
	var holder sandbox
	if len(holders) != 1 || in.do("GET", "/v1/sandboxes/"+holders[0], nil, &holder) != http.StatusOK {
		t.Fatalf("holders %v, want the first build's", holders)
	}
	tenant := holder.Tenant
	if _, e, c := in.cli("", "tenant", "quota", tenant, "--max-sandboxes", "1"); c != 0 {
		t.Fatalf("tenant quota: exit %d: %s", c, e)
	}
	defer in.cli("", "tenant", "quota", tenant, "--max-sandboxes", "0")
	if log, code := build("dfq2"); code != 0 || !strings.Contains(log, "step 2/2: cached: COPY f /f") {
		t.Errorf("a cached rebuild under a quota of 1 with a holder: exit %d, want it built from the cache\n%s", code, log)
	}
	os.WriteFile(filepath.Join(dir, "f"), []byte("two\n"), 0o644)
	if log, code := build("dfq3"); code != 0 || !strings.Contains(log, "step 1/2: cached:") || strings.Contains(log, "step 2/2: cached:") {
		t.Errorf("a rebuild with a new step under a quota of 1: exit %d, want step 1 cached and step 2 run\n%s", code, log)
	}
	if n := len(in.wantOnlyHolders()); n != 2 {
		t.Errorf("after the builds: %d holders, want 2 (the fully cached rebuild made none)", n)
	}
	sb := in.createWith("dfq3", "ns")
	if res := in.exec(sb.ID, "cat", "/built", "/f"); res.Stdout != "built\ntwo\n" {
		t.Errorf("a sandbox from the rebuilt template: %+v", res)
	}
	log, code := build("dfq4")
	if code == 0 || !strings.Contains(log, "over its quota") || !strings.Contains(log, "holders are stopped and do not count") {
		t.Errorf("a build while the quota's one sandbox runs: exit %d, want the quota refusal saying what a build counts\n%s", code, log)
	}
	in.delete(sb.ID)
	in.waitGone(sb.ID)
	in.cli("", "template", "cache", "prune")
}

package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDockerfileBuild builds a template on ns from a Dockerfile (FROM
// minimal, ENV, WORKDIR, COPY of a file and a directory, RUN, CMD) and checks
// that a sandbox from it sees the files, the env and the directory, and that
// its start command ran; that a failing RUN fails the build with its line and
// exit code, and a refused instruction with its line number; and that no
// build sandbox is left behind.
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
		"Dockerfile.fail":    "FROM minimal\nRUN echo about to fail; exit 7\n",
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
	_, stderr, code := in.cli("", "template", "build", "dfapp", "--dockerfile", filepath.Join(dir, "Dockerfile"), "--context", dir)
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
	defer in.delete(sb.ID)
	if res := in.exec(sb.ID, "cat", "/app/hello.txt", "/app/ran.txt"); res.Stdout != "hello from the context\nhello from RUN in /app\n" {
		t.Errorf("files in a sandbox from the template: %+v", res)
	}
	if res := in.exec(sb.ID, "sh", "-c", `echo "$GREETING|$(pwd)"; /app/tools/tool.sh; cat /tmp/started`); res.Stdout != "hello|/app\ntool ran\nstarted\n" {
		t.Errorf("env, workdir, copied directory and start command: %+v", res)
	}

	_, stderr, code = in.cli("", "template", "build", "dffail", "--dockerfile", filepath.Join(dir, "Dockerfile.fail"), "--context", dir)
	if code == 0 || !strings.Contains(stderr, "line 2") || !strings.Contains(stderr, "exit code 7") || !strings.Contains(stderr, "about to fail") {
		t.Errorf("failing RUN: exit %d, want the line, exit code 7 and its output:\n%s", code, stderr)
	}
	_, stderr, code = in.cli("", "template", "build", "dfrefused", "--dockerfile", filepath.Join(dir, "Dockerfile.refused"), "--context", dir)
	if code == 0 || !strings.Contains(stderr, "line 3") || !strings.Contains(stderr, "HEALTHCHECK") {
		t.Errorf("refused instruction: exit %d, want line 3 and HEALTHCHECK:\n%s", code, stderr)
	}
	var list struct {
		Sandboxes []sandbox `json:"sandboxes"`
	}
	if c := in.do("GET", "/v1/sandboxes", nil, &list); c != http.StatusOK {
		t.Fatalf("list sandboxes: HTTP %d", c)
	}
	for _, s := range list.Sandboxes {
		if s.ID != sb.ID && s.State != "deleted" {
			t.Errorf("a build left sandbox %s (%s) behind", s.ID, s.State)
		}
	}
}

package e2b_test

import (
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The git server of gitauth.mjs: a user and a password it takes, served on
// netAllowed:80 in the test's upstream namespace.
const (
	gitUser     = "space-ci"
	gitPassword = "e2b-git-password-0123456789abcdef"
)

// TestE2BSDKGitAuth runs gitauth.mjs with the published @e2b/code-interpreter
// SDK (its e2b 2.51 Git helper) on the code-interpreter template, which has
// git, on ns and vm: clone, push and pull with username/password against a git
// server with HTTP Basic authentication (git http-backend behind
// net/http/cgi) that the sandbox reaches through its egress policy, a wrong
// password (the SDK's GitAuthError), and dangerouslyAuthenticate (the
// password stored in the sandbox's ~/.git-credentials, as E2B stores it).
// The test checks after the run the commits pushed into its repository
// and that the wrong password was refused by the server.
func TestE2BSDKGitAuth(t *testing.T) {
	backend := "/usr/lib/git-core/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		t.Fatalf("%s: %v: install Debian's git package (scripts/deps.sh test)", backend, err)
	}
	for _, tool := range []string{"git", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: scripts/deps.sh test installs it (make test runs it)", tool)
		}
	}
	env := codeInterpreterEnv(t)
	copyFile(t, "gitauth.mjs", filepath.Join(env.work, "gitauth.mjs"))

	root := t.TempDir()
	ns := newUpstreamNetns(t)
	auth := &gitAuthSeen{}
	ln := ns.listen(t, func() (any, error) { return net.Listen("tcp", net.JoinHostPort(netAllowed, "80")) }).(net.Listener)
	git := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, password, ok := r.BasicAuth()
		if !ok || user != gitUser || password != gitPassword {
			auth.refuse(ok)
			w.Header().Set("WWW-Authenticate", `Basic realm="space-ci"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		git.ServeHTTP(w, r)
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })

	for _, rt := range []string{"ns", "vm"} {
		t.Run(rt, func(t *testing.T) {
			repo := seedRepo(t, root, rt)
			srv := env.server(t, rt, "--egress-netns", ns.path)
			before := auth.wrong()
			srv.runScriptEnv(t, env.work, "gitauth.mjs", "GIT_ADDR="+netAllowed, "GIT_URL=http://"+netAllowed+"/"+rt+".git",
				"GIT_USER="+gitUser, "GIT_PASSWORD="+gitPassword)
			out, err := exec.Command("git", "--git-dir", repo, "log", "--format=%s", "main").CombinedOutput()
			if err != nil {
				t.Fatalf("git log: %v\n%s", err, out)
			}
			if got, want := strings.Fields(strings.ReplaceAll(string(out), " ", "_")), []string{"stored_credential", "with_credentials", "seed"}; strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("the commits of main on the server: %q, want %q", got, want)
			}
			if auth.wrong() == before {
				t.Errorf("the server refused no request with a wrong password: the wrong-password clone did not reach it")
			}
			if strings.Contains(srv.Logs(), gitPassword) {
				t.Errorf("the git password is in the server log")
			}
		})
	}
}

// seedRepo makes the bare repository root/NAME.git that the git server
// serves, its main branch holding one commit "seed", pushes allowed.
func seedRepo(t *testing.T, root, name string) string {
	t.Helper()
	repo := filepath.Join(root, name+".git")
	seed := filepath.Join(t.TempDir(), "seed")
	for _, args := range [][]string{
		{"init", "-q", "--bare", "--initial-branch", "main", repo},
		{"-C", repo, "config", "http.receivepack", "true"},
		{"init", "-q", "--initial-branch", "main", seed},
		{"-C", seed, "-c", "user.name=Seed", "-c", "user.email=seed@space.invalid", "commit", "-q", "--allow-empty", "-m", "seed"},
		{"-C", seed, "push", "-q", repo, "main"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return repo
}

// gitAuthSeen counts the requests the git server refused, and those of
// them that carried credentials (the wrong password).
type gitAuthSeen struct {
	mu             sync.Mutex // guards the counts
	refused, creds int
}

func (s *gitAuthSeen) refuse(withCreds bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused++
	if withCreds {
		s.creds++
	}
}

func (s *gitAuthSeen) wrong() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creds
}

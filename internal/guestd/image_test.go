package guestd_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/guestd"
	"github.com/spacesandbox/space/internal/template/imagecfg"
)

// imageTree is a tree for Config.ImageRoot with accounts root, user
// (1000), app (4321, also in group staff 4400), and the image config body.
func imageTree(t *testing.T, body string) (guestd.Config, string) {
	t.Helper()
	root := t.TempDir()
	// Commands run as the tree's users: they must reach it.
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"etc/space", "app", "home/user"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::" + root + "/home/user:/bin/sh\napp:x:4321:4321::/nonexistent:/bin/sh\n",
		"etc/group":  "root:x:0:\nuser:x:1000:\napp:x:4321:\nstaff:x:4400:app\n",
	}
	if body != "" {
		files["etc/space/image-config.json"] = body
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return guestd.Config{
		ImageRoot: root, AutostartDir: filepath.Join(root, "no-autostart"),
		PasswdPath: filepath.Join(root, "etc/passwd"), GroupPath: filepath.Join(root, "etc/group"),
	}, root
}

// probe prints what a command sees of its defaults.
const probe = `echo "$FOO|$BAR|$BAZ|$PATH|$PWD|$(id -u):$(id -g)"`

// TestImageDefaults: the image's Env, WorkingDir and User are the defaults
// of every command, under Init's variables and the request's own env, cwd
// and user.
func TestImageDefaults(t *testing.T) {
	requireRoot(t, "commands run as the image's user")
	cfg, root := imageTree(t, "")
	app := filepath.Join(root, "app")
	writable := filepath.Join(app, "bin")
	if err := os.Mkdir(writable, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(writable, 0o777); err != nil {
		t.Fatal(err)
	}
	img := imagecfg.Config{
		User: "app:staff", WorkingDir: app,
		Env: []string{"FOO=image", "BAR=image", "BAZ=image", "PATH=/usr/local/bin:/usr/bin:/bin:/image/bin:" + writable},
	}
	if err := imagecfg.Write(root, img); err != nil {
		t.Fatal(err)
	}
	c := startGuest(t, cfg)
	if _, err := c.Control().Init(testCtx(t), connect.NewRequest(&controlv1.InitRequest{
		DefaultUser: "user", DefaultWorkdir: filepath.Join(root, "home/user"), EnvVars: map[string]string{"BAR": "init"},
	})); err != nil {
		t.Fatalf("Init: %v", err)
	}
	for _, tc := range []struct {
		name string
		req  func(*processv1.StartRequest)
		user string
		want string
	}{
		{"image defaults", func(*processv1.StartRequest) {}, "",
			"image|init|image|/usr/local/bin:/usr/bin:/bin:/image/bin:" + writable + "|" + app + "|4321:4400"},
		{"request env wins", func(r *processv1.StartRequest) { r.Process.Envs = map[string]string{"FOO": "req", "BAR": "req"} }, "",
			"req|req|image|/usr/local/bin:/usr/bin:/bin:/image/bin:" + writable + "|" + app + "|4321:4400"},
		{"request cwd wins", func(r *processv1.StartRequest) { slash := "/"; r.Process.Cwd = &slash }, "",
			"image|init|image|/usr/local/bin:/usr/bin:/bin:/image/bin:" + writable + "|/|4321:4400"},
		{"request user wins", func(*processv1.StartRequest) {}, "user",
			"image|init|image|/usr/local/bin:/usr/bin:/bin:/image/bin:" + writable + "|" + app + "|1000:1000"},
		// Root's commands keep only the image PATH directories nobody else
		// can write (catalogue A-8): not the missing /image/bin, nor app/bin.
		{"root's PATH linted", func(*processv1.StartRequest) {}, "root",
			"image|init|image|/usr/local/bin:/usr/bin:/bin|" + app + "|0:0"},
		{"root's own PATH kept", func(r *processv1.StartRequest) { r.Process.Envs = map[string]string{"PATH": writable + ":/bin"} }, "root",
			"image|init|image|" + writable + ":/bin|" + app + "|0:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := sh(probe)
			tc.req(req)
			res := run(t, c, req, tc.user)
			if got := strings.TrimSpace(res.stdout.String()); got != tc.want {
				t.Fatalf("command saw\n got %s\nwant %s\n(stderr %q)", got, tc.want, res.stderr.String())
			}
		})
	}
}

// TestImageUserFallback: an image user the tree lacks, and an image
// WorkingDir that does not exist, leave the sandbox's defaults.
func TestImageUserFallback(t *testing.T) {
	requireRoot(t, "commands run as the sandbox user")
	cfg, root := imageTree(t, `{"User":"ghost","WorkingDir":"/nonexistent/dir","Env":["FOO=image"]}`)
	home := filepath.Join(root, "home/user")
	c := startGuest(t, cfg)
	if _, err := c.Control().Init(testCtx(t), connect.NewRequest(&controlv1.InitRequest{DefaultUser: "user", DefaultWorkdir: home})); err != nil {
		t.Fatalf("Init: %v", err)
	}
	res := run(t, c, sh(`echo "$FOO|$PWD|$(id -u)"`), "")
	if got, want := strings.TrimSpace(res.stdout.String()), "image|"+home+"|1000"; got != want {
		t.Fatalf("command saw %s, want %s (stderr %q)", got, want, res.stderr.String())
	}
	// A numeric image user that the tree has.
	if err := imagecfg.Write(root, imagecfg.Config{User: "4321"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Control().Init(testCtx(t), connect.NewRequest(&controlv1.InitRequest{DefaultUser: "user", DefaultWorkdir: home})); err != nil {
		t.Fatalf("Init: %v", err)
	}
	res = run(t, c, sh(`echo "$(id -u):$(id -g)|$USER"`), "")
	if got, want := strings.TrimSpace(res.stdout.String()), "4321:4321|app"; got != want {
		t.Fatalf("with User 4321 the command saw %s, want %s", got, want)
	}
	// A numeric image user the tree lacks runs as that uid, as docker run
	// does: group 0 or the one named, HOME=/, no USER.
	for user, want := range map[string]string{"7777": "7777:0|/|unset", "7777:55": "7777:55|/|unset"} {
		if err := imagecfg.Write(root, imagecfg.Config{User: user}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Control().Init(testCtx(t), connect.NewRequest(&controlv1.InitRequest{DefaultUser: "user", DefaultWorkdir: home})); err != nil {
			t.Fatalf("Init: %v", err)
		}
		res = run(t, c, sh(`echo "$(id -u):$(id -g)|$HOME|${USER-unset}"`), "")
		if got := strings.TrimSpace(res.stdout.String()); got != want {
			t.Fatalf("with User %s (not in the tree's passwd) the command saw %s, want %s (stderr %q)", user, got, want, res.stderr.String())
		}
	}
}

// TestImageStartCommand: Entrypoint+Cmd start at Init (exec form: the
// shell metacharacters are plain arguments), with the image defaults,
// tagged "start"; Init returns once the only exposed TCP port listens, and
// a second Init does not start it again.
func TestImageStartCommand(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg, root := imageTree(t, "")
	out := filepath.Join(root, "app", "started")
	if err := os.Chmod(filepath.Join(root, "app"), 0o777); err != nil {
		t.Fatal(err)
	}
	server := fmt.Sprintf(`import os,socket,sys,time
time.sleep(0.3)
open(%q,"a").write(os.environ["MODE"]+"|"+os.getcwd()+"|"+"|".join(sys.argv[1:])+"\n")
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", %d)); s.listen(); time.sleep(300)`, out, port)
	img := imagecfg.Config{
		Env: []string{"MODE=image"}, WorkingDir: filepath.Join(root, "app"),
		Entrypoint: []string{"python3", "-c", server}, Cmd: []string{"$HOME", "a b;c"},
		ExposedPorts: map[string]struct{}{fmt.Sprintf("%d/tcp", port): {}, "53/udp": {}},
	}
	if os.Geteuid() != 0 {
		img.User = self(t).Username
		cfg.PasswdPath, cfg.GroupPath = "", ""
	}
	if err := imagecfg.Write(root, img); err != nil {
		t.Fatal(err)
	}
	c := startGuest(t, cfg)
	for i := range 2 {
		if _, err := c.Control().Init(testCtx(t), connect.NewRequest(&controlv1.InitRequest{DefaultUser: "user"})); err != nil {
			t.Fatalf("Init: %v", err)
		}
		if i == 0 {
			conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Fatalf("the start command's port right after Init: %v (Init did not wait for it)", err)
			}
			conn.Close()
		}
	}
	got, _ := os.ReadFile(out)
	if want := "image|" + filepath.Join(root, "app") + "|$HOME|a b;c\n"; string(got) != want {
		t.Errorf("the start command wrote %q, want %q (once, exec form, image env and dir)", got, want)
	}
	tags := processTags(t, c)
	if strings.Join(tags, ",") != "start" {
		t.Errorf("processes after two Inits: tags %q, want one start", tags)
	}
}

// TestImageHostileFile: image config files that are huge, not JSON, not
// regular, symlinked out of the tree or asking for tricks are ignored: Init
// succeeds promptly and commands run with the sandbox's own defaults.
func TestImageHostileFile(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside.json")
	if err := os.WriteFile(outside, []byte(`{"Env":["FOO=outside"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		make func(p string) error
	}{
		{"100 MiB", func(p string) error {
			f, err := os.Create(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.WriteString(`{"Env":["FOO=huge"],"Labels":{"x":"`); err != nil {
				return err
			}
			return f.Truncate(100 << 20)
		}},
		{"invalid JSON", func(p string) error { return os.WriteFile(p, []byte(`{"Env":["FOO=bad"]`), 0o644) }},
		{"not an object", func(p string) error { return os.WriteFile(p, []byte(`["FOO=bad"]`), 0o644) }},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"symlink out of the tree", func(p string) error { return os.Symlink(outside, p) }},
		{"dot-dot workdir", func(p string) error {
			return os.WriteFile(p, []byte(`{"Env":["FOO=bad"],"WorkingDir":"/tmp/../etc"}`), 0o644)
		}},
		{"relative workdir", func(p string) error {
			return os.WriteFile(p, []byte(`{"Env":["FOO=bad"],"WorkingDir":"../../etc"}`), 0o644)
		}},
		{"bad env", func(p string) error { return os.WriteFile(p, []byte(`{"Env":["FOO=bad","X\u0000=1"]}`), 0o644) }},
		{"ready cmd NUL", func(p string) error {
			return os.WriteFile(p, []byte(`{"Env":["FOO=bad"],"SpaceReadyCmd":"sleep 600\u0000"}`), 0o644)
		}},
		{"ready cmd too long", func(p string) error {
			return os.WriteFile(p, []byte(`{"Env":["FOO=bad"],"SpaceReadyCmd":"sleep 600;`+strings.Repeat(" ", imagecfg.MaxReadyCmd)+`"}`), 0o644)
		}},
		{"ready timeout too big", func(p string) error {
			return os.WriteFile(p, []byte(`{"Env":["FOO=bad"],"SpaceReadyCmd":"false","SpaceReadyTimeout":100000}`), 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, root := imageTree(t, "")
			if err := tc.make(filepath.Join(root, imagecfg.Path)); err != nil {
				t.Fatal(err)
			}
			cfg.PasswdPath, cfg.GroupPath = "", ""
			c := startGuest(t, cfg)
			ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
			defer cancel()
			if _, err := c.Control().Init(ctx, connect.NewRequest(&controlv1.InitRequest{DefaultUser: self(t).Username})); err != nil {
				t.Fatalf("Init with a hostile image config: %v", err)
			}
			req := sh(`echo "$FOO|$PWD"`)
			res := run(t, c, req, "")
			if got, want := strings.TrimSpace(res.stdout.String()), "|"+self(t).HomeDir; got != want {
				t.Fatalf("command saw %q, want %q: the hostile file was applied", got, want)
			}
		})
	}
}

// readyTree is an image tree whose start command (when start is not "")
// and SpaceReadyCmd run as the test's user in the tree's /app.
func readyTree(t *testing.T, start, ready string, timeout int) (guestd.Config, string) {
	t.Helper()
	cfg, root := imageTree(t, "")
	app := filepath.Join(root, "app")
	if err := os.Chmod(app, 0o777); err != nil {
		t.Fatal(err)
	}
	img := imagecfg.Config{WorkingDir: app, Env: []string{"APP=" + app}, SpaceReadyCmd: ready, SpaceReadyTimeout: timeout}
	if start != "" {
		img.Entrypoint = []string{"/bin/sh", "-c", start}
	}
	if os.Geteuid() != 0 {
		img.User = self(t).Username
		cfg.PasswdPath, cfg.GroupPath = "", ""
	}
	if err := imagecfg.Write(root, img); err != nil {
		t.Fatal(err)
	}
	return cfg, app
}

// TestImageReadyCmd: Init returns only once the ready command exited 0:
// the start command makes the file the check tests after a second, and
// the check (image env and directory) passed after several tries.
func TestImageReadyCmd(t *testing.T) {
	cfg, app := readyTree(t, `sleep 1; touch "$APP/ready"; exec sleep 300`,
		`echo try >> tries; test -f "$APP/ready" && [ "$PWD" = "$APP" ]`, 20)
	c := startGuest(t, cfg)
	start := time.Now()
	resp, err := c.Control().Init(testCtx(t), connect.NewRequest(&controlv1.InitRequest{DefaultUser: "user"}))
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	if nr := resp.Msg.GetStartNotReady(); nr != nil {
		t.Errorf("Init's answer says the start command was not ready (%v); it was", nr)
	}
	if _, err := os.Stat(filepath.Join(app, "ready")); err != nil {
		t.Fatalf("right after Init (%v): %v: Init did not wait for the ready command", time.Since(start), err)
	}
	b, _ := os.ReadFile(filepath.Join(app, "tries"))
	if n := strings.Count(string(b), "try"); n < 2 {
		t.Errorf("the ready command ran %d times, want several (it fails until the file exists)", n)
	}
	if tags := processTags(t, c); strings.Join(tags, ",") != "start" {
		t.Errorf("processes after Init: tags %q, want the start command alone (no ready try left)", tags)
	}
}

// TestImageReadyCmdNeverReady: a ready command that never exits 0 holds
// Init for its SpaceReadyTimeout, not longer (a try that hangs is killed),
// and the sandbox still starts. Init's answer says why: the last try's end
// and its output's last KiB.
func TestImageReadyCmdNeverReady(t *testing.T) {
	for _, tc := range []struct{ name, ready, status, tail string }{
		{"fails", `echo warming; head -c 5000 /dev/zero | tr '\0' x; echo; echo "db not up" >&2; exit 3`, "exit status 3", "db not up"},
		{"hangs", "echo hanging; exec sleep 600", "signal: killed", "hanging"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _ := readyTree(t, "exec sleep 300", tc.ready, 2)
			c := startGuest(t, cfg)
			ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Second)
			defer cancel()
			start := time.Now()
			resp, err := c.Control().Init(ctx, connect.NewRequest(&controlv1.InitRequest{DefaultUser: "user"}))
			if err != nil {
				t.Fatalf("Init with a ready command that never passes: %v", err)
			}
			if took := time.Since(start); took < 2*time.Second {
				t.Errorf("Init returned after %v, before the ready command's 2s bound", took)
			}
			nr := resp.Msg.GetStartNotReady()
			if nr == nil {
				t.Fatal("Init's answer has no start_not_ready: the failure is seen by nobody")
			}
			if nr.GetStage() != "ready_failed" || nr.GetLastStatus() != tc.status || nr.GetTries() < 1 {
				t.Errorf("start_not_ready = stage %q, last %q, tries %d; want ready_failed, %q, >= 1", nr.GetStage(), nr.GetLastStatus(), nr.GetTries(), tc.status)
			}
			if out := nr.GetOutputTail(); len(out) > 1024 || !strings.HasSuffix(string(out), tc.tail) {
				t.Errorf("output tail: %d bytes ending %q; want at most 1024 ending %q", len(out), out[max(0, len(out)-40):], tc.tail)
			}
			if !strings.Contains(nr.GetDetail(), "within 2s") {
				t.Errorf("detail %q, want the bound it missed (within 2s)", nr.GetDetail())
			}
			res := run(t, c, sh("echo up"), "")
			if got := strings.TrimSpace(res.stdout.String()); got != "up" {
				t.Fatalf("a command after the bound: %q, want up", got)
			}
			if tags := processTags(t, c); strings.Join(tags, ",") != "start" {
				t.Errorf("processes after Init: tags %q, want the start command alone (the hung try killed)", tags)
			}
		})
	}
}

// TestImageStartNotStarted: a start command that cannot be started is in
// Init's answer (stage not_started, with the error), and Init succeeds.
func TestImageStartNotStarted(t *testing.T) {
	cfg, app := readyTree(t, "", "", 0)
	root := filepath.Dir(app)
	img := imagecfg.Config{Entrypoint: []string{"/nonexistent/start"}}
	if os.Geteuid() != 0 {
		img.User = self(t).Username
	}
	if err := imagecfg.Write(root, img); err != nil {
		t.Fatal(err)
	}
	c := startGuest(t, cfg)
	resp, err := c.Control().Init(testCtx(t), connect.NewRequest(&controlv1.InitRequest{DefaultUser: "user"}))
	if err != nil {
		t.Fatalf("Init with a start command that cannot start: %v", err)
	}
	nr := resp.Msg.GetStartNotReady()
	if nr.GetStage() != "not_started" || !strings.Contains(nr.GetDetail(), "/nonexistent/start") {
		t.Errorf("start_not_ready = %v, want stage not_started naming /nonexistent/start", nr)
	}
}

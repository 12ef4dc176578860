package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/template/imagecfg"
)

// TestImageDefaults builds a template from a directory whose tree has
// image defaults (/etc/space/image-config.json) and checks, on ns, that
// exec runs with the image's env, directory and user unless the request
// names its own, and that the start command (exec form, as the image user)
// listens on its only exposed TCP port before create returns: it waits a
// second before listening, so without the readiness wait the first exec
// finds nothing there.
func TestImageDefaults(t *testing.T) { testImageDefaults(t, "ns") }

// TestImageDefaultsVM is TestImageDefaults on the vm runtime: the same
// guest daemon, started by space-guest as the VM's init.
func TestImageDefaultsVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
	testImageDefaults(t, "vm")
}

func testImageDefaults(t *testing.T, runtime string) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox not installed")
	}
	in := startServer(t, newDataDir(t))
	defer in.stop()

	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"bin", "etc", "srv/www", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "id", "pwd", "echo", "cat", "sleep", "httpd", "wget", "ps"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"etc/passwd":         "root:x:0:0:root:/root:/bin/sh\napp:x:4321:4321::/srv:/bin/sh\n",
		"etc/group":          "root:x:0:\napp:x:4321:\n",
		"srv/www/index.html": "served by the start command\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := imagecfg.Config{
		User: "app", WorkingDir: "/srv", Env: []string{"FOO=image", "BAR=image", "PATH=/bin"},
		Entrypoint:   []string{"/bin/sh", "-c"},
		Cmd:          []string{"sleep 1; exec httpd -f -p 127.0.0.1:8080 -h /srv/www"},
		ExposedPorts: map[string]struct{}{"8080/tcp": {}},
	}
	if err := imagecfg.Write(root, img); err != nil {
		t.Fatal(err)
	}
	if _, e, c := in.cli("", "template", "build", "imgdefaults", "--from", "dir:"+root); c != 0 {
		t.Fatalf("template build: %d %s\n%s", c, e, in.logs())
	}
	sb := in.createWith("imgdefaults", runtime)
	defer in.delete(sb.ID)

	// First, before anything else: the start command listens already.
	if res := in.exec(sb.ID, "wget", "-qO-", "http://127.0.0.1:8080/index.html"); res.ExitCode != 0 || res.Stdout != "served by the start command\n" {
		t.Fatalf("the start command's port right after create: %+v (create did not wait for it)\n%s", res, in.logs())
	}
	if res := in.exec(sb.ID, "sh", "-c", `echo "$FOO|$BAR|$PATH|$(pwd)|$(id -u)"`); res.Stdout != "image|image|/bin|/srv|4321\n" {
		t.Errorf("exec with the image defaults saw %q (stderr %q), want image|image|/bin|/srv|4321", res.Stdout, res.Stderr)
	}
	var res execResult
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{
		"cmd": []string{"sh", "-c", `echo "$FOO|$BAR|$(pwd)|$(id -u)"`}, "env": map[string]string{"BAR": "request"},
		"cwd": "/tmp", "user": "root",
	}, &res); code != http.StatusOK {
		t.Fatalf("exec with its own env, cwd and user: HTTP %d %+v", code, res)
	}
	if res.Stdout != "image|request|/tmp|0\n" {
		t.Errorf("exec naming env, cwd and user saw %q, want image|request|/tmp|0 (the request wins)", res.Stdout)
	}
	ps := in.exec(sb.ID, "ps", "-o", "user,args")
	var startLine string
	for _, line := range strings.Split(ps.Stdout, "\n") {
		if strings.Contains(line, "httpd -f") {
			startLine = line
		}
	}
	if f := strings.Fields(startLine); len(f) == 0 || (f[0] != "app" && f[0] != "4321") {
		t.Errorf("the start command is not running as app:\n%s", ps.Stdout)
	}
}

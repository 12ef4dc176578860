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

// TestStartNotReadyEvent: a template whose SpaceReadyCmd exits 3 (after
// writing a line and a terminal escape) within its 2 s bound: the sandbox
// starts on ns, and its events say why the start command was not ready,
// with the exit status and the output, escaped.
func TestStartNotReadyEvent(t *testing.T) { testStartNotReadyEvent(t, "ns") }

// TestStartNotReadyEventVM is TestStartNotReadyEvent on the vm runtime.
func TestStartNotReadyEventVM(t *testing.T) {
	requireQEMU(t)
	testStartNotReadyEvent(t, "vm")
}

// TestImageReadyCmdVM: on vm, create returns once the ready command
// passed: the start command makes a file after a second, the ready command
// tests for it, and the first exec already sees it. No start_not_ready
// event.
func TestImageReadyCmdVM(t *testing.T) {
	requireQEMU(t)
	in := startServer(t, newDataDir(t))
	defer in.stop()
	root := busyboxRoot(t)
	img := imagecfg.Config{
		Env:           []string{"PATH=/bin"},
		Entrypoint:    []string{"/bin/sh", "-c", "sleep 1; echo made > /tmp/made; exec sleep 600"},
		SpaceReadyCmd: "test -f /tmp/made", SpaceReadyTimeout: 30,
	}
	if err := imagecfg.Write(root, img); err != nil {
		t.Fatal(err)
	}
	buildDirTemplate(t, in, "readypass", root)
	sb := in.createWith("readypass", "vm")
	defer in.delete(sb.ID)
	if res := in.exec(sb.ID, "cat", "/tmp/made"); res.ExitCode != 0 || res.Stdout != "made\n" {
		t.Fatalf("first exec after create: %+v, want the start command's file (create did not wait for the ready command)\n%s", res, in.logs())
	}
	if ev, ok := startNotReadyEvent(t, in, sb.ID); ok {
		t.Errorf("a start_not_ready event for a start command that got ready: %q", ev)
	}
}

func testStartNotReadyEvent(t *testing.T, runtime string) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	root := busyboxRoot(t)
	img := imagecfg.Config{
		Env:           []string{"PATH=/bin"},
		Entrypoint:    []string{"/bin/sh", "-c", "exec sleep 600"},
		SpaceReadyCmd: `echo "db not up"; printf '\033[2J'; exit 3`, SpaceReadyTimeout: 2,
	}
	if err := imagecfg.Write(root, img); err != nil {
		t.Fatal(err)
	}
	buildDirTemplate(t, in, "readyfail", root)
	sb := in.createWith("readyfail", runtime)
	defer in.delete(sb.ID)
	if res := in.exec(sb.ID, "echo", "up"); res.ExitCode != 0 || res.Stdout != "up\n" {
		t.Fatalf("exec in a sandbox whose ready command failed: %+v, want it running\n%s", res, in.logs())
	}
	ev, ok := startNotReadyEvent(t, in, sb.ID)
	if !ok {
		t.Fatalf("no start_not_ready event: the ready command's failure is seen by nobody\n%s", in.logs())
	}
	t.Logf("start_not_ready: %s", ev)
	for _, want := range []string{"ready command failed", "within 2s", "exit status 3", `db not up\n\x1b[2J`} {
		if !strings.Contains(ev, want) {
			t.Errorf("start_not_ready event %q lacks %q", ev, want)
		}
	}
	if strings.ContainsRune(ev, 0x1b) {
		t.Errorf("start_not_ready event %q carries a raw terminal escape", ev)
	}
}

// requireQEMU skips a vm test where QEMU is missing.
func requireQEMU(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
}

// busyboxRoot is a root filesystem tree of busybox and a root account.
func busyboxRoot(t *testing.T) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox not installed")
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"bin", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "echo", "cat", "sleep", "test", "printf"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n", "etc/group": "root:x:0:\n"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// buildDirTemplate builds template name from the tree at root.
func buildDirTemplate(t *testing.T, in *instance, name, root string) {
	t.Helper()
	if _, e, c := in.cli("", "template", "build", name, "--from", "dir:"+root); c != 0 {
		t.Fatalf("template build %s: %d %s\n%s", name, c, e, in.logs())
	}
}

// startNotReadyEvent is the message of sandbox id's start_not_ready event.
func startNotReadyEvent(t *testing.T, in *instance, id string) (string, bool) {
	t.Helper()
	var list struct {
		Events []struct{ Type, Message string }
	}
	if code := in.do("GET", "/v1/sandboxes/"+id+"/events", nil, &list); code != http.StatusOK {
		t.Fatalf("events of %s: HTTP %d", id, code)
	}
	for _, e := range list.Events {
		if e.Type == "start_not_ready" {
			return e.Message, true
		}
	}
	t.Logf("events of %s: %+v", id, list.Events)
	return "", false
}

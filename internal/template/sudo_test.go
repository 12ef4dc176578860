package template

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The base template has what E2B's has: python3 as `python`, and sudo with
// the sudoers drop-in and the wrapper (issue 21 bug 8).
func TestBasePackagesHaveSudoAndPython(t *testing.T) {
	for _, p := range []string{"python3", "python-is-python3", "sudo", "libnss-myhostname", "bash"} {
		if !slices.Contains(BasePackages, p) {
			t.Errorf("BasePackages %v lack %s", BasePackages, p)
		}
	}
	if !wantsSudo(BasePackages) || wantsSudo([]string{"bash"}) {
		t.Error("wantsSudo does not follow the package list")
	}
}

func TestAddSudo(t *testing.T) {
	dest := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/local/bin", "etc/sudoers.d"} {
		if err := os.MkdirAll(filepath.Join(dest, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := addSudo(dest, io.Discard); err == nil || !strings.Contains(err.Error(), "/usr/bin/sudo is not in the new root") {
		t.Fatalf("addSudo without sudo installed: %v, want an error naming /usr/bin/sudo", err)
	}
	if err := os.WriteFile(filepath.Join(dest, "usr/bin/sudo"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := addSudo(dest, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		rel  string
		mode os.FileMode
		want string
	}{{sudoersPath, 0o440, "user ALL=(ALL:ALL) NOPASSWD: ALL\n"}, {sudoWrapperPath, 0o755, sudoWrapper}} {
		fi, err := os.Lstat(filepath.Join(dest, f.rel))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != f.mode {
			t.Errorf("/%s: mode %v, want %v", f.rel, fi.Mode(), f.mode)
		}
		if b, _ := os.ReadFile(filepath.Join(dest, f.rel)); string(b) != f.want {
			t.Errorf("/%s = %q, want %q", f.rel, b, f.want)
		}
	}
}

// runWrapper runs the sudo wrapper under setpriv with setprivArgs and
// returns its exit code and stderr.
func runWrapper(t *testing.T, setprivArgs ...string) (int, string) {
	t.Helper()
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	// The script on stdin: another uid may not be able to read a test's
	// temporary directory.
	var stderr bytes.Buffer
	cmd := exec.Command("setpriv", append(setprivArgs, "sh", "-s", "--", "-n", "true")...)
	cmd.Stdin = strings.NewReader(sudoWrapper)
	cmd.Stderr = &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stderr.String()
}

// In a process that cannot gain privileges (an ns sandbox), a user's sudo
// fails at once, saying why and what to do instead; where it can, or for
// root, the real sudo runs.
func TestSudoWrapper(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing to another uid with setpriv needs root")
	}
	nobody := []string{"--reuid", "65534", "--regid", "65534", "--clear-groups"}
	code, msg := runWrapper(t, append([]string{"--no-new-privs"}, nobody...)...)
	if code != 1 || !strings.Contains(msg, "no new privileges") || !strings.Contains(msg, "vm runtime") || !strings.Contains(msg, "{user: 'root'}") {
		t.Errorf("sudo with no new privileges: exit %d, %q; want 1 and the message", code, msg)
	}
	// Without the flag, and for root with it, the wrapper hands over to
	// /usr/bin/sudo (absent on a host without sudo: the shell says so).
	for _, args := range [][]string{nobody, {"--no-new-privs"}} {
		code, msg := runWrapper(t, args...)
		if strings.Contains(msg, "no new privileges") {
			t.Errorf("setpriv %v: the wrapper refused (exit %d, %q); want the real sudo", args, code, msg)
		}
		if _, err := os.Stat("/usr/bin/sudo"); err != nil && !strings.Contains(msg, "/usr/bin/sudo") {
			t.Errorf("setpriv %v: exit %d, %q; want an attempt to run /usr/bin/sudo", args, code, msg)
		}
	}
}

// TestBaseTemplateSudo builds the real base template (debootstrap: minutes,
// a Debian mirror) and checks, in it, that python is python3, that user
// gets root from sudo without a password, and that with no new privileges
// the wrapper's message comes instead. SPACE_TEST_BASE_BUILD=1 runs it.
func TestBaseTemplateSudo(t *testing.T) {
	if os.Getenv("SPACE_TEST_BASE_BUILD") != "1" {
		t.Skip("SPACE_TEST_BASE_BUILD=1 builds the base template (minutes)")
	}
	if os.Geteuid() != 0 {
		t.Skip("debootstrap needs root")
	}
	dest := filepath.Join(t.TempDir(), "base")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var log bytes.Buffer
	if err := Base(ctx, dest, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	run := func(userspec, setpriv, cmd string) (string, int) {
		// A mount and UTS namespace with /proc and a host name no file
		// names, as a sandbox has.
		inner := "hostname sbx0123456789abcdefghij && mount -t proc proc " + dest + "/proc && exec " + setpriv + " chroot --userspec=" + userspec + " " + dest + " /bin/bash -l -c \"$1\""
		c := exec.Command("unshare", "--mount", "--uts", "--fork", "sh", "-c", inner, "sh", cmd)
		c.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/home/user", "LC_ALL=C"}
		out, err := c.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out)), code
	}
	if out, code := run("1000:1000", "", "python --version"); code != 0 || !strings.HasPrefix(out, "Python 3") {
		t.Errorf("python --version as user: exit %d, %q", code, out)
	}
	if out, code := run("0:0", "", "visudo -c"); code != 0 {
		t.Errorf("visudo -c: exit %d, %q", code, out)
	}
	if out, code := run("1000:1000", "", "sudo -n id -u"); code != 0 || out != "0" {
		t.Errorf("sudo -n id -u as user: exit %d, %q; want 0 and \"0\"", code, out)
	}
	if out, code := run("1000:1000", "setpriv --no-new-privs", "sudo -n id -u"); code != 1 || !strings.Contains(out, "no new privileges") {
		t.Errorf("sudo with no new privileges: exit %d, %q; want 1 and the wrapper's message", code, out)
	}
}

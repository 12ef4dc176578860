package template

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
)

// BaseSuite and BasePackages define the default template "base": Debian 12
// with the tools agents expect (E2B conventions).
const BaseSuite = "bookworm"

// BasePackages are installed into the base template on top of minbase:
// python-is-python3 makes `python` python3, and sudo gives user "user"
// passwordless root as on E2B (sudo.go; not in ns sandboxes, which cannot
// gain privileges); libnss-myhostname resolves the sandbox's own host name,
// which no /etc/hosts names (sudo warns "unable to resolve host" on every
// run without it).
var BasePackages = []string{"bash", "python3", "python-is-python3", "sudo", "libnss-myhostname", "git", "curl", "ca-certificates", "procps"}

// Base builds the default template: debootstrap of Debian 12 (bookworm) with
// BasePackages and the user "user". It needs root, debootstrap and network
// access to a Debian mirror, and takes minutes; progress shows the steps.
func Base(ctx context.Context, dest string, progress io.Writer) error {
	return Build(ctx, Source{Kind: KindDebootstrap, Suite: BaseSuite, Packages: BasePackages}, dest, progress)
}

// debootstrap installs a minimal Debian suite with pkgs into dest from the
// host's mirror, adds the user "user" (uid 1000, home /home/user, shell
// /bin/bash), with passwordless sudo when pkgs has sudo (addSudo), and
// removes apt's caches.
func debootstrap(ctx context.Context, suite string, pkgs []string, dest string, progress io.Writer) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("debootstrap needs root: %w", errdefs.ErrFailedPrecondition)
	}
	bin, err := exec.LookPath("debootstrap")
	if err != nil {
		return fmt.Errorf("debootstrap is not installed (apt-get install debootstrap): %w", errdefs.ErrFailedPrecondition)
	}
	mirror := HostMirror(suite)
	args := []string{"--variant=minbase"}
	if len(pkgs) > 0 {
		args = append(args, "--include="+strings.Join(pkgs, ","))
	}
	args = append(args, suite, dest, mirror)
	fmt.Fprintf(progress, "debootstrap %s from %s\n", strings.Join(args, " "), mirror)
	if err := run(ctx, progress, bin, args...); err != nil {
		return err
	}
	if err := addUser(ctx, dest, progress); err != nil {
		return err
	}
	if wantsSudo(pkgs) {
		if err := addSudo(dest, progress); err != nil {
			return err
		}
	}
	return cleanApt(ctx, dest, progress)
}

// addUser creates "user" in the chroot unless it exists.
func addUser(ctx context.Context, dest string, progress io.Writer) error {
	passwd, err := os.ReadFile(filepath.Join(dest, "etc/passwd"))
	if err != nil {
		return fmt.Errorf("read /etc/passwd of the new root: %w", err)
	}
	if strings.HasPrefix(string(passwd), "user:") || strings.Contains(string(passwd), "\nuser:") {
		return nil
	}
	fmt.Fprintln(progress, "adding user 'user' (uid 1000, /home/user)")
	return run(ctx, progress, "chroot", dest, "useradd", "--create-home", "--home-dir", "/home/user",
		"--uid", "1000", "--user-group", "--shell", "/bin/bash", "user")
}

// cleanApt removes downloaded packages and package lists from the new root.
func cleanApt(ctx context.Context, dest string, progress io.Writer) error {
	fmt.Fprintln(progress, "cleaning apt caches")
	if err := run(ctx, progress, "chroot", dest, "apt-get", "clean"); err != nil {
		return err
	}
	lists, _ := filepath.Glob(filepath.Join(dest, "var/lib/apt/lists/*"))
	for _, p := range lists {
		if filepath.Base(p) == "lock" || filepath.Base(p) == "partial" {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("clean apt lists: %w", err)
		}
	}
	return nil
}

// run runs a command with its output going to progress.
func run(ctx context.Context, progress io.Writer, name string, args ...string) error {
	var tail tailBuffer
	out := io.MultiWriter(progress, &tail)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, lastLines(tail.buf, 5))
	}
	return nil
}

// tailBuffer keeps the last few KiB written to it, for error messages.
type tailBuffer struct{ buf []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	const keep = 4 << 10
	t.buf = append(t.buf, p...)
	if len(t.buf) > keep {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-keep:]...)
	}
	return len(p), nil
}

package template

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
)

// busyboxPaths are where Debian's busybox-static package puts the binary.
var busyboxPaths = []string{"/bin/busybox", "/usr/bin/busybox"}

// bashStaticPaths are where Debian's bash-static package puts its binary.
// The minimal template ships it as /bin/bash when the host has it: the E2B
// SDKs run every command as `/bin/bash -l -c CMD` (docs/e2b.md).
var bashStaticPaths = []string{"/bin/bash-static", "/usr/bin/bash-static"}

// minimalFiles are the account files of the minimal template: root, the E2B
// convention user "user" (uid 1000, home /home/user), and nobody.
var minimalFiles = map[string]string{
	"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n" +
		"user:x:1000:1000:user:/home/user:/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
	"etc/group": "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n",
	"etc/shadow": "root:*:19000:0:99999:7:::\n" +
		"user:*:19000:0:99999:7:::\n" +
		"nobody:*:19000:0:99999:7:::\n",
}

// minimalDirs are created in the minimal template, with their modes.
var minimalDirs = []struct {
	path string
	mode os.FileMode
}{
	{"bin", 0o755}, {"sbin", 0o755}, {"usr/bin", 0o755}, {"usr/sbin", 0o755},
	{"etc", 0o755}, {"dev", 0o755}, {"proc", 0o555}, {"sys", 0o555}, {"run", 0o755},
	{"var/tmp", 0o777 | os.ModeSticky}, {"tmp", 0o777 | os.ModeSticky},
	{"root", 0o700}, {"home/user", 0o755},
}

// Minimal builds the busybox template into dest: the static busybox of
// Debian's busybox-static package with a symlink for each applet, account
// files for root, user (1000) and nobody, and the usual directories. It
// installs busybox-static with apt-get when the host lacks it and runs as
// root.
func Minimal(ctx context.Context, dest string) error {
	bin, err := findBusybox(ctx)
	if err != nil {
		return fmt.Errorf("minimal template: %w", err)
	}
	if err := prepareDest(dest); err != nil {
		return fmt.Errorf("minimal template: %w", err)
	}
	if err := buildMinimal(ctx, bin, dest); err != nil {
		return fmt.Errorf("minimal template: %w", err)
	}
	if err := finish(dest); err != nil {
		return fmt.Errorf("minimal template: %w", err)
	}
	return nil
}

func buildMinimal(ctx context.Context, bin, dest string) error {
	t := tree{root: dest}
	for _, d := range minimalDirs {
		if err := t.mkdir(d.path, d.mode); err != nil {
			return err
		}
	}
	if err := lchown(dest+"/home/user", 1000, 1000); err != nil {
		return err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("read %s: %w", bin, err)
	}
	if err := t.writeFile("bin/busybox", data, 0o755); err != nil {
		return err
	}
	for name, content := range minimalFiles {
		mode := os.FileMode(0o644)
		if name == "etc/shadow" {
			mode = 0o640
		}
		if err := t.writeFile(name, []byte(content), mode); err != nil {
			return err
		}
	}
	if err := addBash(t); err != nil {
		return err
	}
	applets, err := busyboxApplets(ctx, bin)
	if err != nil {
		return err
	}
	for _, rel := range applets {
		path, err := t.parents(rel)
		if err != nil {
			return err
		}
		if _, err := t.replace(path, false); err != nil {
			return err
		}
		if err := os.Symlink("/bin/busybox", path); err != nil {
			return fmt.Errorf("applet %s: %w", rel, err)
		}
	}
	return nil
}

// addBash copies a static bash, when the host has one, to bin/bash.
func addBash(t tree) error {
	for _, p := range bashStaticPaths {
		if !isStatic(p) {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		return t.writeFile("bin/bash", data, 0o755)
	}
	return nil
}

// busyboxApplets lists the applet paths of bin ("bin/sh", "usr/bin/awk"),
// relative to the root, without busybox itself.
func busyboxApplets(ctx context.Context, bin string) ([]string, error) {
	out, err := exec.CommandContext(ctx, bin, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", bin, err)
	}
	var applets []string
	for _, line := range strings.Split(string(out), "\n") {
		rel, err := cleanRel(strings.TrimSpace(line))
		if err != nil || rel == "" || rel == "bin/busybox" {
			continue
		}
		applets = append(applets, rel)
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("%s --list-full listed no applets", bin)
	}
	return applets, nil
}

// findBusybox returns the path of a statically linked busybox, installing
// Debian's busybox-static when none is found and this process is root.
func findBusybox(ctx context.Context) (string, error) {
	if p, ok := staticBusybox(); ok {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("no static busybox at %s; install it with: apt-get install busybox-static: %w",
			strings.Join(busyboxPaths, " or "), errdefs.ErrFailedPrecondition)
	}
	cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", "busybox-static")
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get install busybox-static: %w: %s", err, lastLines(out, 5))
	}
	if p, ok := staticBusybox(); ok {
		return p, nil
	}
	return "", fmt.Errorf("busybox-static installed but no static busybox found: %w", errdefs.ErrFailedPrecondition)
}

func staticBusybox() (string, bool) {
	for _, p := range busyboxPaths {
		if isStatic(p) {
			return p, true
		}
	}
	return "", false
}

// isStatic reports whether path is an ELF executable without an interpreter
// (a dynamically linked busybox would not run in a root without libc).
func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return f.Type == elf.ET_EXEC || f.Type == elf.ET_DYN
}

// lastLines returns the last n lines of command output, for error messages.
func lastLines(out []byte, n int) string {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
}

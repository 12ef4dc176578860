package template

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// The base template gives user "user" passwordless sudo, as E2B's templates
// do. sudo works where the sandbox may gain privileges: in a vm sandbox the
// guest is its own kernel's. An ns sandbox runs every process with no new
// privileges (seccomp needs it), so a set-uid program cannot become root
// there and sudo only says the flag "prevents sudo from running as root"
// and that "the container configuration" should change, which a SPACE user
// cannot do. sudoWrapper stands first on PATH and says what to do instead:
// root is already at hand in an ns sandbox (a command run as user root), or
// the vm runtime.

// sudoersPath and sudoersLine are the sudoers drop-in of the base template.
const (
	sudoersPath = "etc/sudoers.d/90-space-user"
	sudoersLine = "user ALL=(ALL:ALL) NOPASSWD: ALL\n"
)

// sudoWrapperPath is where the wrapper goes: /usr/local/bin comes before
// /usr/bin on Debian's PATH, for root and for user.
const sudoWrapperPath = "usr/local/bin/sudo"

// sudoWrapper runs the real sudo unless the process cannot gain privileges
// (NoNewPrivs: 1 in /proc/self/status, which is the kernel's word, not a
// guess at the runtime) and is not root already; then it exits 1 with a
// message that names the way out. Root itself goes to the real sudo, which
// needs no set-uid bit to run as root.
const sudoWrapper = `#!/bin/sh
# SPACE: sudo in a sandbox that cannot gain privileges (the ns runtime).
if [ "$(id -u)" != 0 ] && grep -qs '^NoNewPrivs:[[:space:]]*1' /proc/self/status; then
	echo "sudo: not available in this sandbox: it runs with no new privileges (SPACE's ns runtime), so no program can become root." >&2
	echo "sudo: run the command as root instead (E2B SDK: commands.run(cmd, {user: 'root'}); space exec --user root ID -- CMD), or create the sandbox on the vm runtime, where sudo works." >&2
	exit 1
fi
exec /usr/bin/sudo "$@"
`

// wantsSudo reports whether a debootstrap package list installs sudo.
func wantsSudo(pkgs []string) bool { return slices.Contains(pkgs, "sudo") }

// addSudo writes the sudoers drop-in (0440, as sudo requires) and the
// wrapper into the new root dest, which has sudo installed.
func addSudo(dest string, progress io.Writer) error {
	if _, err := os.Stat(filepath.Join(dest, "usr/bin/sudo")); err != nil {
		return fmt.Errorf("sudo was asked for but /usr/bin/sudo is not in the new root: %w", err)
	}
	fmt.Fprintln(progress, "giving user 'user' passwordless sudo (/etc/sudoers.d/90-space-user)")
	t := tree{root: dest}
	if err := t.writeFile(sudoersPath, []byte(sudoersLine), 0o440); err != nil {
		return fmt.Errorf("write /%s: %w", sudoersPath, err)
	}
	if err := t.writeFile(sudoWrapperPath, []byte(sudoWrapper), 0o755); err != nil {
		return fmt.Errorf("write /%s: %w", sudoWrapperPath, err)
	}
	return nil
}

// Package hostbin is what SPACE's host binaries share: their names and where
// one finds another (beside itself, where `make build` puts them all), the
// process logger, and the data directory. It imports nothing of SPACE, so
// that the small privileged binaries (space-node-manager, space-host-bridge)
// can use it.
package hostbin

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// The host binaries, each built from cmd/<name>.
const (
	// Space is the CLI, the control plane and the sandbox manager.
	Space = "space"
	// NodeManager is the node's only root process.
	NodeManager = "space-node-manager"
	// HostBridge is started once per execution by the sandbox manager.
	HostBridge = "space-host-bridge"
	// Guest is the static guest daemon put into every sandbox.
	Guest = "space-guest"
)

// Beside returns the path of the host binary name in the directory of the
// running binary, whether or not it exists.
func Beside(name string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find %s: the path of this binary: %w", name, err)
	}
	return filepath.Join(filepath.Dir(self), name), nil
}

// Find returns the path of the host binary name beside the running binary,
// or an error that says how to build it.
func Find(name string) (string, error) {
	path, err := Beside(name)
	if err != nil {
		return "", err
	}
	return path, Check(path)
}

// Check refuses a path that is not an executable file, saying how to build
// the binary it should be.
func Check(path string) error {
	st, err := os.Stat(path)
	if err == nil && (!st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err != nil {
		name := filepath.Base(path)
		return fmt.Errorf("%s: %w: build it with `make build` (go build -o %s ./cmd/%s)", path, err, path, name)
	}
	return nil
}

// Exec replaces this process with the host binary name beside it, run with
// args (argv[0] its path) and this process's environment: `space
// node-manager` and `space host-bridge` are launchers of their binaries.
// It returns only on failure.
func Exec(name string, args []string) error {
	path, err := Find(name)
	if err != nil {
		return err
	}
	return syscall.Exec(path, append([]string{path}, args...), os.Environ())
}

// Logger returns the process logger: text on stderr, at the level named by
// SPACE_LOG_LEVEL (debug, info, warn, error; default info).
func Logger() *slog.Logger {
	var level slog.Level
	switch strings.ToLower(os.Getenv("SPACE_LOG_LEVEL")) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// DefaultDataDir is the data directory without a flag: $SPACE_DATA_DIR,
// /var/lib/space for root, ~/.local/share/space for anyone else.
func DefaultDataDir() (string, error) {
	if d := os.Getenv("SPACE_DATA_DIR"); d != "" {
		return d, nil
	}
	if os.Geteuid() == 0 {
		return "/var/lib/space", nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the data directory: set SPACE_DATA_DIR: %w", err)
	}
	return filepath.Join(home, ".local", "share", "space"), nil
}

// DataDir returns the absolute data directory a --data-dir flag names
// (DefaultDataDir when empty), creating it (0700) if needed.
func DataDir(flagValue string) (string, error) {
	dir := flagValue
	if dir == "" {
		d, err := DefaultDataDir()
		if err != nil {
			return "", err
		}
		dir = d
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("data dir %s: %w", dir, err)
	}
	return dir, nil
}

// RootPATH is the PATH of the node's root process (the node-manager) and of
// every program it runs by name (QEMU, btrfs, mount, cp, the kernel build's
// tools): system directories only, whatever PATH it was started with — an
// inherited PATH could name a directory a sandbox or an unprivileged user
// writes, and root would run what they put there (catalogue A-8).
const RootPATH = "/usr/sbin:/usr/bin:/sbin:/bin"

// SetRootPATH checks every directory of RootPATH with CheckRootExec against
// sandboxTrees (the directories sandboxes can write into: the data
// directory, which holds their roots, volumes, disks and execution
// directories) and makes RootPATH this process's PATH.
func SetRootPATH(sandboxTrees ...string) error {
	for _, dir := range filepath.SplitList(RootPATH) {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			continue // not on this system (a merged /usr has no /sbin of its own, say)
		}
		if err := CheckRootExec(dir, sandboxTrees...); err != nil {
			return fmt.Errorf("PATH: %w", err)
		}
	}
	return os.Setenv("PATH", RootPATH)
}

// CheckRootExec refuses a program (or a directory of programs) that a root
// process would run or read its configuration from when someone other than
// root could change it (catalogue ): it, resolved through symlinks,
// lies under one of sandboxTrees; or it or a directory above it belongs to
// another user than root (or this process's, for an unprivileged node), or is
// writable by its group or others — a world-writable directory with the
// sticky bit (/tmp) is allowed above it, where others cannot replace what
// is not theirs.
func CheckRootExec(path string, sandboxTrees ...string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if real, err = filepath.Abs(real); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, tree := range sandboxTrees {
		t, err := filepath.EvalSymlinks(tree)
		if err != nil {
			t = filepath.Clean(tree)
		}
		if rel, err := filepath.Rel(t, real); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return fmt.Errorf("%s (%s) is under %s, which sandboxes write into: install it outside the data directory", path, real, tree)
		}
	}
	return checkOwners(path, real, "replace what root runs", nil)
}

// CheckRootDir refuses a directory a root process keeps its state in or
// reads its configuration from — the data directory (execution state files
// name the processes root kills and the uids it hands out), the cache
// directory (the guest kernel, the accelerator probe's answer), the
// directory of its socket — when someone other than root, this process's
// user or one of owners (the unprivileged node's uid, which writes its own
// records there) could change what it holds (catalogue A-9): it, resolved
// through symlinks, or a directory above it belongs to another user or is
// writable by its group or others (a sticky world-writable directory such
// as /tmp is allowed above it). A path that does not exist yet is checked
// from its nearest existing ancestor, under which root will create it.
func CheckRootDir(path string, owners ...uint32) error {
	p := filepath.Clean(path)
	for {
		if _, err := os.Lstat(p); err == nil || !errors.Is(err, os.ErrNotExist) || p == filepath.Dir(p) {
			break
		}
		p = filepath.Dir(p)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if real, err = filepath.Abs(real); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if fi, err := os.Stat(real); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("%s: %s is not a directory", path, real)
	}
	return checkOwners(path, real, "change what root keeps or reads there", owners)
}

// checkOwners walks real (path resolved) and every directory above it: each
// must belong to root, this process's user or one of owners, and not be
// writable by its group or others, except a sticky directory above it.
func checkOwners(path, real, could string, owners []uint32) error {
	euid := uint32(os.Geteuid())
	for p, last := real, true; ; p, last = filepath.Dir(p), false {
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner for %s", path, p)
		}
		if st.Uid != 0 && st.Uid != euid && !slices.Contains(owners, st.Uid) {
			return fmt.Errorf("%s: %s belongs to uid %d, who could %s: make it root's (chown root %s)", path, p, st.Uid, could, p)
		}
		sticky := fi.Mode()&os.ModeSticky != 0 && fi.IsDir() && !last
		if fi.Mode().Perm()&0o022 != 0 && !sticky {
			return fmt.Errorf("%s: %s is writable by its group or others (mode %v), who could %s: chmod go-w %s", path, p, fi.Mode().Perm(), could, p)
		}
		if p == "/" {
			return nil
		}
	}
}

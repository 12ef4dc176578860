package template

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// GuestRootPATH is the PATH of the processes the guest daemon (root in the
// sandbox) starts without one of their own — guestd's default, the ns
// runtime's too.
const GuestRootPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// lintRootPATH refuses a template in which a directory on GuestRootPATH — or
// one above it — could be written by a user other than root: whatever an
// unprivileged process of the sandbox put there, the next command run as root
// by name would run (catalogue A-8, the Copilot sandbox's path hijack).
// Directories are resolved inside root, symlinks included; a missing one is
// skipped. A directory above may be world-writable with the sticky bit (as
// /tmp is); a PATH directory itself may not, since anyone could add to it.
// Owners are checked when the builder is root (an unprivileged build keeps
// its own uid on every entry).
func lintRootPATH(root string) error {
	for _, dir := range filepath.SplitList(GuestRootPATH) {
		chain, err := resolveInRoot(root, dir)
		if err != nil {
			return err
		}
		for i, rel := range chain {
			fi, err := os.Lstat(filepath.Join(root, rel))
			if err != nil {
				return fmt.Errorf("root's PATH: %s: %w", dir, err)
			}
			if !fi.IsDir() {
				return invalid("root's PATH: %s (/%s) is %s, not a directory", dir, rel, describe(fi.Mode()))
			}
			last := i == len(chain)-1
			sticky := fi.Mode()&fs.ModeSticky != 0 && !last
			if fi.Mode().Perm()&0o022 != 0 && !sticky {
				return invalid("root's PATH: %s: /%s is writable by its group or others (mode %v): a sandbox user could put programs there that root runs; chmod go-w /%s in the image", dir, rel, fi.Mode().Perm(), rel)
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && st.Uid != 0 {
				return invalid("root's PATH: %s: /%s belongs to uid %d, who could put programs there that root runs; chown root /%s in the image", dir, rel, st.Uid, rel)
			}
		}
	}
	return nil
}

// resolveInRoot resolves the absolute path p inside root as the sandbox
// would see it, following symlinks (an absolute target starts again at
// root, ".." stops at root), and returns every directory it passes through,
// relative to root, from root itself ("") to p's own. A missing component
// ends the chain where it is.
func resolveInRoot(root, p string) ([]string, error) {
	chain := []string{""}
	cur := ""
	rest := strings.Split(strings.Trim(p, "/"), "/")
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			if cur == "." {
				cur = ""
			}
			chain = append(chain, cur)
			continue
		}
		next := path.Join(cur, c)
		fi, err := os.Lstat(filepath.Join(root, next))
		if os.IsNotExist(err) {
			return nil, nil // not in this image: nothing on it to run
		}
		if err != nil {
			return nil, fmt.Errorf("root's PATH: %s: %w", p, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if hops++; hops > 40 {
				return nil, invalid("root's PATH: %s: too many symlinks", p)
			}
			target, err := os.Readlink(filepath.Join(root, next))
			if err != nil {
				return nil, fmt.Errorf("root's PATH: %s: %w", p, err)
			}
			if strings.HasPrefix(target, "/") {
				cur = ""
			}
			rest = append(strings.Split(target, "/"), rest...)
			continue
		}
		cur = next
		chain = append(chain, cur)
	}
	return chain, nil
}

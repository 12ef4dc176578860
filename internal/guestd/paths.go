package guestd

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// maxPathBytes bounds a path received from the host side (PATH_MAX).
const maxPathBytes = 4096

// errBadPath reports a path that cannot name a file.
var errBadPath = errors.New("invalid path")

// resolvePath turns a client path into a clean absolute path inside the
// sandbox: "~" and "~/x" expand to home, relative paths resolve against home,
// "." and ".." are cleaned lexically. The daemon runs inside the sandbox's own
// mount namespace, so ".." cannot leave the sandbox: it only names another
// sandbox path, which the caller is allowed to reach anyway.
func resolvePath(p, home string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte: %w", p, errBadPath)
	}
	if len(p) > maxPathBytes {
		return "", fmt.Errorf("path longer than %d bytes: %w", maxPathBytes, errBadPath)
	}
	if home == "" || home[0] != '/' || strings.IndexByte(home, 0) >= 0 {
		home = "/"
	}
	switch {
	case p == "":
		return "", fmt.Errorf("empty path: %w", errBadPath)
	case p == "~":
		p = home
	case strings.HasPrefix(p, "~/"):
		p = path.Join(home, p[2:])
	case p[0] != '/':
		p = path.Join(home, p)
	}
	return path.Clean(p), nil
}

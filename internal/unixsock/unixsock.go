// Package unixsock listens on and dials unix socket paths of any length.
//
// A sockaddr_un holds at most 107 bytes of path, and data directories (a test's
// temporary directory, a deep /var/lib path) easily make longer socket paths.
// For those, the socket's directory is opened and the socket is named through
// /proc/self/fd/N/NAME, a short path the kernel resolves to the same file.
package unixsock

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxPath is the longest path a sockaddr_un takes with its terminating NUL.
const maxPath = 107

// Listen listens on the unix socket path.
func Listen(path string) (net.Listener, error) {
	var ln net.Listener
	err := withShortPath(path, func(p string) error {
		var err error
		ln, err = net.Listen("unix", p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	// The listener would unlink its (short, fd-relative) name on Close, which
	// no longer resolves; unlink the real path instead.
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
		return &unlinkingListener{UnixListener: ul, path: path}, nil
	}
	return ln, nil
}

type unlinkingListener struct {
	*net.UnixListener
	path string
}

func (l *unlinkingListener) Close() error {
	err := l.UnixListener.Close()
	_ = os.Remove(l.path)
	return err
}

// Dial connects to the unix socket path.
func Dial(ctx context.Context, path string) (net.Conn, error) {
	var c net.Conn
	err := withShortPath(path, func(p string) error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "unix", p)
		return err
	})
	return c, err
}

// withShortPath calls fn with path, or with an equivalent short path while the
// socket's directory is held open.
func withShortPath(path string, fn func(string) error) error {
	if len(path) <= maxPath {
		return fn(path)
	}
	dir, name := filepath.Split(path)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open socket directory %s: %w", dir, err)
	}
	defer unix.Close(fd)
	short := fmt.Sprintf("/proc/self/fd/%d/%s", fd, name)
	if len(short) > maxPath {
		return fmt.Errorf("socket name %q is too long", name)
	}
	return fn(short)
}

package template

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CodeInterpreterName is the template the code interpreter runs in, and
// CodeInterpreterAliases the names E2B's code-interpreter SDKs create their
// sandboxes from by default (Sandbox.defaultTemplate), which SPACE's E2B
// surface maps onto it.
const CodeInterpreterName = "code-interpreter"

// CodeInterpreterAliases are the other names of the code-interpreter template.
var CodeInterpreterAliases = []string{"code-interpreter-v1"}

// CodeInterpreterPort is the port of the code interpreter's server in the
// sandbox: the one E2B's SDKs send /execute and /contexts to.
const CodeInterpreterPort = 49999

// CodeInterpreterPackages are installed into the code-interpreter template
// on top of BasePackages: a Jupyter kernel with the scientific stack, all
// from Debian. They are installed with apt in the debootstrapped tree, not
// by debootstrap itself, whose resolver leaves python3-zmq unconfigured.
var CodeInterpreterPackages = []string{
	"python3-ipykernel", "python3-jupyter-client", "python3-numpy", "python3-pandas", "python3-matplotlib",
}

// The code interpreter's server and the autostart entry that starts it (see
// guestd's autostart: every executable in AutostartDir runs as the
// sandbox's user when the sandbox starts).
const (
	codeInterpreterServerPath = "usr/local/lib/space/code-interpreter/server.py"
	codeInterpreterStartPath  = "etc/space/autostart.d/code-interpreter"
)

//go:embed codeinterpreter/server.py
var codeInterpreterServer []byte

// codeInterpreterStart is the autostart entry: it runs the server on
// CodeInterpreterPort with its log in /tmp. Init waits up to 60 s for the
// port: under TCG on a busy host the server (Python, the Jupyter client)
// took longer than the default 10 s, and an SDK's first runCode after the
// create was refused (connection refused on 49999).
var codeInterpreterStart = []byte(fmt.Sprintf(`#!/bin/sh
# Started by space-guest as the sandbox's user (/etc/space/autostart.d).
# space-ready-port: %d
# space-ready-wait: 60
exec /usr/bin/python3 -u /%s --port %d >>/tmp/space-code-interpreter.log 2>&1
`, CodeInterpreterPort, codeInterpreterServerPath, CodeInterpreterPort))

// CodeInterpreter builds the code-interpreter template into dest: Debian
// with CodeInterpreterPackages (through debootstrap, as Base) and SPACE's
// code interpreter server, started in every sandbox of the template.
//
// With cacheDir set, the Debian tree is kept under cacheDir/templates,
// named by the suite and packages, and later builds copy it (seconds
// instead of the minutes debootstrap takes); the server is written on top
// at every build, so a new server never needs a new debootstrap.
func CodeInterpreter(ctx context.Context, dest, cacheDir string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	if err := prepareDest(dest); err != nil {
		return err
	}
	var err error
	if cacheDir == "" {
		err = codeInterpreterTree(ctx, dest, progress)
	} else {
		var cached string
		if cached, err = cachedTree(ctx, cacheDir, codeInterpreterRecipe(), codeInterpreterTree, progress); err == nil {
			err = copyDir(ctx, cached, dest, progress)
		}
	}
	if err != nil {
		return fmt.Errorf("template %s: %w", CodeInterpreterName, err)
	}
	if err := addCodeInterpreter(dest); err != nil {
		return fmt.Errorf("template %s: %w", CodeInterpreterName, err)
	}
	if err := finish(dest); err != nil {
		return fmt.Errorf("template %s: %w", CodeInterpreterName, err)
	}
	if err := lintRootPATH(dest); err != nil {
		return fmt.Errorf("template %s: %w", CodeInterpreterName, err)
	}
	return nil
}

// addCodeInterpreter writes the server and its autostart entry, root's and
// read-only to the sandbox's user.
func addCodeInterpreter(dest string) error {
	t := tree{root: dest}
	if err := t.writeFile(codeInterpreterServerPath, codeInterpreterServer, 0o644); err != nil {
		return fmt.Errorf("write the code interpreter server: %w", err)
	}
	if err := t.writeFile(codeInterpreterStartPath, codeInterpreterStart, 0o755); err != nil {
		return fmt.Errorf("write the code interpreter's autostart entry: %w", err)
	}
	return nil
}

// codeInterpreterTree installs Debian with BasePackages and the user (as
// Base), then CodeInterpreterPackages with apt.
func codeInterpreterTree(ctx context.Context, dest string, progress io.Writer) error {
	if err := debootstrap(ctx, BaseSuite, BasePackages, dest, progress); err != nil {
		return err
	}
	if err := run(ctx, progress, "chroot", dest, "apt-get", "update"); err != nil {
		return err
	}
	args := append([]string{dest, "apt-get", "install", "-y", "--no-install-recommends"}, CodeInterpreterPackages...)
	if err := run(ctx, progress, "chroot", args...); err != nil {
		return err
	}
	return cleanApt(ctx, dest, progress)
}

// codeInterpreterRecipe names what codeInterpreterTree installs: the cache
// key of its tree.
func codeInterpreterRecipe() string {
	return Source{Kind: KindDebootstrap, Suite: BaseSuite, Packages: BasePackages}.String() +
		" then apt-get install " + strings.Join(CodeInterpreterPackages, ",")
}

// cachedTree returns the root of a finished tree of recipe under
// cacheDir/templates, made by build first when none is there. Builders of
// one recipe take turns (a lock file beside it): the second finds the
// first's tree instead of building its own. A build goes to a temporary
// directory renamed into place when it is complete, so an interrupted one
// is never taken for a finished one.
func cachedTree(ctx context.Context, cacheDir, recipe string, build func(ctx context.Context, dest string, progress io.Writer) error, progress io.Writer) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	if !filepath.IsAbs(cacheDir) {
		return "", invalid("template cache %q: must be absolute", cacheDir)
	}
	sum := sha256.Sum256([]byte(recipe))
	parent := filepath.Join(cacheDir, "templates")
	name := CodeInterpreterName + "-" + BaseSuite + "-" + hex.EncodeToString(sum[:8])
	final := filepath.Join(parent, name)
	root := filepath.Join(final, "root")
	cached := func() bool {
		fi, err := os.Stat(root)
		return err == nil && fi.IsDir()
	}
	if cached() {
		fmt.Fprintf(progress, "using the cached Debian tree %s (%s)\n", final, recipe)
		return root, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("template cache: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(parent, "."+name+".lock"), progress)
	if err != nil {
		return "", fmt.Errorf("template cache: %w", err)
	}
	defer unlock()
	if cached() {
		fmt.Fprintf(progress, "using the cached Debian tree %s (%s), built meanwhile\n", final, recipe)
		return root, nil
	}
	tmp, err := os.MkdirTemp(parent, ".build-")
	if err != nil {
		return "", fmt.Errorf("template cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	// The tree is the templates' source: only root may change it.
	if err := os.Chmod(tmp, 0o700); err != nil {
		return "", fmt.Errorf("template cache: %w", err)
	}
	if err := build(ctx, filepath.Join(tmp, "root"), progress); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, "RECIPE"), []byte(recipe+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("template cache: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("template cache: keep %s: %w", final, err)
	}
	return root, nil
}

// lockFile takes an exclusive flock of path, waiting (and saying so once)
// while another process holds it, until ctx is done.
func lockFile(ctx context.Context, path string, progress io.Writer) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for said := false; ; said = true {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !said {
			fmt.Fprintf(progress, "waiting for another build of the same tree (%s)\n", path)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// IsCodeInterpreterAlias reports whether name is another name of the
// code-interpreter template.
func IsCodeInterpreterAlias(name string) bool {
	return slices.Contains(CodeInterpreterAliases, name)
}

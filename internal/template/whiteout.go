package template

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
)

// The whiteout names of the OCI image spec's layer format.
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// whiteout handles rel when it is a whiteout entry of a layer and reports
// whether it was one (a whiteout writes nothing). ".wh.NAME" removes NAME
// from the lower layers; ".wh..wh..opq" removes every child of its directory
// the current layer has not written; other ".wh..wh." names (aufs
// bookkeeping) are skipped. The directory is reached through real
// directories only, so a whiteout cannot delete through a symlink.
func (t tree) whiteout(rel string) (bool, error) {
	dir, base := path.Split(rel)
	if !strings.HasPrefix(base, whiteoutPrefix) {
		return false, nil
	}
	dir = strings.TrimSuffix(dir, "/")
	switch {
	case base == whiteoutOpaque:
		return true, t.opaque(dir)
	case strings.HasPrefix(base, whiteoutMeta):
		return true, nil
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if name == "" || name == "." || name == ".." {
		return true, invalid("whiteout %q names no entry", clip(rel))
	}
	parent, ok, err := t.lookupDir(dir)
	if err != nil || !ok {
		return true, err
	}
	if err := os.RemoveAll(filepath.Join(parent, name)); err != nil {
		return true, fmt.Errorf("whiteout %s: %w", rel, err)
	}
	return true, nil
}

// opaque empties directory dir of what lower layers put there: a child the
// current layer has not written is removed; one it has (itself or something
// under it) is kept, and when it is a real directory the same is done inside
// it, so a lower layer's files beside the layer's own are removed at every
// depth.
func (t tree) opaque(dir string) error {
	abs, ok, err := t.lookupDir(dir)
	if err != nil || !ok {
		return err
	}
	return t.opaqueAt(dir, abs)
}

func (t tree) opaqueAt(dir, abs string) error {
	entries, err := os.ReadDir(abs)
	if err != nil {
		return fmt.Errorf("opaque directory %s: %w", dir, err)
	}
	for _, e := range entries {
		rel, child := path.Join(dir, e.Name()), filepath.Join(abs, e.Name())
		switch {
		case !t.written[rel]:
			if err := os.RemoveAll(child); err != nil {
				return fmt.Errorf("opaque directory %s: %w", dir, err)
			}
		case e.Type().IsDir(): // from ReadDir: Lstat's type, never a symlink's target
			if err := t.opaqueAt(rel, child); err != nil {
				return err
			}
		}
	}
	return nil
}

// lookupDir returns the absolute path of directory rel ("" is the root) when
// every component of it is a real directory. A missing component is not an
// error (ok is false: there is nothing to remove); a symlink or a file on the
// way is.
func (t tree) lookupDir(rel string) (abs string, ok bool, err error) {
	cur := t.root
	if rel == "" {
		return cur, true, nil
	}
	for _, d := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, d)
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", false, nil
		case err != nil:
			return "", false, fmt.Errorf("inspect %s: %w", cur, err)
		case !fi.IsDir():
			return "", false, fmt.Errorf("whiteout under %s: a %s, not a directory: %w",
				strings.TrimPrefix(cur, t.root), describe(fi.Mode()), errdefs.ErrInvalidArgument)
		}
	}
	return cur, true, nil
}

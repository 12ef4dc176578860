package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Hostname is written to every template's /etc/hostname; the runtime sets the
// sandbox's own name at start.
const Hostname = "sandbox"

// Build builds a template from src into dest, which must be an empty
// directory or not exist yet. progress receives human-readable lines of long
// steps (debootstrap's output, the files copied or the archive read so far);
// nil discards it. On error dest may hold a partial tree:
// the caller, who owns dest, removes it.
func Build(ctx context.Context, src Source, dest string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	if err := prepareDest(dest); err != nil {
		return err
	}
	var err error
	switch src.Kind {
	case KindDir:
		err = copyDir(ctx, src.Path, dest, progress)
	case KindTar:
		err = extractTar(ctx, src.Path, dest, progress)
	case KindOCI:
		err = importOCI(ctx, src.Path, src.Ref, dest, progress)
	case KindDockerArchive:
		err = importDockerArchive(ctx, src.Path, src.Ref, dest, progress)
	case KindExt4:
		err = extractExt4(ctx, src.Path, dest)
	case KindDebootstrap:
		err = debootstrap(ctx, src.Suite, src.Packages, dest, progress)
	default:
		err = invalid("unknown source kind %q", src.Kind)
	}
	if err != nil {
		return fmt.Errorf("template from %s: %w", src, err)
	}
	if err := finish(dest); err != nil {
		return fmt.Errorf("template from %s: %w", src, err)
	}
	if err := lintRootPATH(dest); err != nil {
		return fmt.Errorf("template from %s: %w", src, err)
	}
	return nil
}

// prepareDest makes sure dest is an empty directory.
func prepareDest(dest string) error {
	if !filepath.IsAbs(dest) {
		return invalid("template destination %q: must be absolute", dest)
	}
	entries, err := os.ReadDir(dest)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dest, 0o755); err != nil {
			return fmt.Errorf("create template destination: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("template destination %s: %w", dest, err)
	case len(entries) > 0:
		return fmt.Errorf("template destination %s is not empty: %w", dest, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// finish adds what every template has: an empty /.space (the guest binary's
// mount point) and /etc/hostname. Both are written without following
// symlinks the source may have put at /etc or /.space.
func finish(dest string) error {
	t := tree{root: dest}
	if err := t.mkdir(".space", 0o755); err != nil {
		return fmt.Errorf("create /.space: %w", err)
	}
	if err := t.writeFile("etc/hostname", []byte(Hostname+"\n"), 0o644); err != nil {
		return fmt.Errorf("write /etc/hostname: %w", err)
	}
	return nil
}

// Size returns the bytes used by the regular files of the template at root,
// counting each hard-linked file once and following no symlinks.
func Size(root string) (int64, error) {
	var total int64
	seen := map[inode]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			key := inode{uint64(st.Dev), st.Ino}
			if seen[key] {
				return nil
			}
			seen[key] = true
		}
		total += fi.Size()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("size of template %s: %w", root, err)
	}
	return total, nil
}

package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spacesandbox/space/internal/ext4tar"
)

// extractExt4 builds a template from the ext4 image at path (a vm sandbox's
// disk, which its guest wrote: hostile). The image is read in user space by
// ext4tar, never mounted, and its tree goes through Extract's rules (no
// absolute names or "..", nothing written through a symlink, hard links
// inside the tree, devices skipped, DefaultLimits) as a tar stream through
// a pipe: nothing is staged, and a stream past the limits stops the reader.
func extractExt4(ctx context.Context, path, dest string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open disk image: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	read := make(chan error, 1)
	go func() {
		lim := ext4tar.DefaultLimits
		lim.MaxEntries, lim.MaxBytes = DefaultLimits.MaxEntries, DefaultLimits.MaxBytes
		err := ext4tar.Write(ctx, f, fi.Size(), pw, lim)
		pw.CloseWithError(err)
		read <- err
	}()
	err = Extract(ctx, pr, dest, DefaultLimits)
	// An extraction that stopped early ends the reader's writes.
	pr.CloseWithError(errors.New("extraction ended"))
	cancel()
	rerr := <-read
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("disk image: %w", rerr)
	}
	return nil
}

package vm

import (
	"fmt"
	"os"
	"syscall"
)

// imageUsage reports what a VM's disk image holds: the bytes it has
// allocated on the host and its size. The image is sparse and the guest's
// discards reach it (discard=unmap), so the allocation follows what the
// guest's file system uses, its metadata included; the size is the most it
// can hold, fixed when the image was cloned. Blocks shared with the
// template by a reflink clone are counted as the image's own: they are
// what the guest sees as used.
func imageUsage(path string) (used, size uint64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("disk image: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || fi.Size() < 0 || st.Blocks < 0 {
		return 0, 0, fmt.Errorf("disk image %s: no allocation to read", path)
	}
	size = uint64(fi.Size())
	return min(uint64(st.Blocks)*512, size), size, nil
}

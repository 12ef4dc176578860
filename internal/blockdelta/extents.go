package blockdelta

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// span is a byte range [start, end) of a file.
type span struct{ start, end int64 }

// dataSpans lists the ranges of f below size that hold data, using
// SEEK_DATA/SEEK_HOLE. A filesystem without hole reporting reports the whole
// file as data, which is correct, only slower.
func dataSpans(f *os.File, size int64) ([]span, error) {
	fd := int(f.Fd())
	var spans []span
	for off := int64(0); off < size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // no data past off
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return []span{{off, size}}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("blockdelta: seek data in %s at %d: %w", f.Name(), off, err)
		}
		if start >= size {
			break
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("blockdelta: seek hole in %s at %d: %w", f.Name(), start, err)
		}
		end = min(end, size)
		spans = append(spans, span{start, end})
		off = end
	}
	return spans, nil
}

// extent is one FIEMAP extent: the file bytes [logical, logical+length) are
// stored at physical.
type extent struct{ logical, physical, length int64 }

// FIEMAP ABI (linux/fiemap.h).
const (
	fsIocFiemap    = 0xC020660B // _IOWR('f', 11, struct fiemap)
	fiemapFlagSync = 0x1

	fiemapExtentLast = 0x1
	// Extents whose physical address does not identify their bytes: unknown
	// or delayed allocation, compressed or encrypted (the address is that of
	// the whole encoded extent), inline, not block aligned, unwritten.
	fiemapUnsafe = 0x2 | 0x4 | 0x8 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800

	fiemapHeaderLen = 32
	fiemapExtentLen = 56
	fiemapBatch     = 512
)

// fiemap lists f's extents below size whose physical address identifies their
// content; extents that cannot be trusted that way are left out (their blocks
// are compared by reading them). It returns an error when the filesystem does
// not support FIEMAP.
func fiemap(f *os.File, size int64) ([]extent, error) {
	buf := make([]byte, fiemapHeaderLen+fiemapBatch*fiemapExtentLen)
	var out []extent
	for start := int64(0); start < size; {
		clear(buf)
		ne := (*[4]uint64)(unsafe.Pointer(&buf[0]))
		ne[0] = uint64(start)
		ne[1] = uint64(size - start)
		hdr := (*[8]uint32)(unsafe.Pointer(&buf[0]))
		hdr[4] = fiemapFlagSync // fm_flags
		hdr[6] = fiemapBatch    // fm_extent_count
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
			return nil, fmt.Errorf("blockdelta: FIEMAP %s: %w", f.Name(), e)
		}
		mapped := int(hdr[5])
		if mapped == 0 {
			break
		}
		last, prev := false, start
		for i := range min(mapped, fiemapBatch) {
			p := unsafe.Pointer(&buf[fiemapHeaderLen+i*fiemapExtentLen])
			fe := (*[3]uint64)(p)
			flags := *(*uint32)(unsafe.Add(p, 40))
			ext := extent{int64(fe[0]), int64(fe[1]), int64(fe[2])}
			if flags&fiemapUnsafe == 0 && ext.length > 0 {
				out = append(out, ext)
			}
			start = ext.logical + ext.length
			last = flags&fiemapExtentLast != 0
		}
		if last || start <= prev {
			break
		}
	}
	return out, nil
}

// sameMount reports whether a and b are on the same mount, so that the
// physical addresses FIEMAP reports for them are comparable. btrfs subvolumes
// have their own st_dev but share the mount, hence the mount id.
func sameMount(a, b *os.File) bool {
	var sa, sb unix.Statx_t
	if unix.Statx(int(a.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &sa) != nil ||
		unix.Statx(int(b.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &sb) != nil {
		return false
	}
	if sa.Mask&unix.STATX_MNT_ID == 0 || sb.Mask&unix.STATX_MNT_ID == 0 {
		return false
	}
	return sa.Mnt_id == sb.Mnt_id
}

// spanCursor answers "does [o, e) overlap a span" for ascending queries.
type spanCursor struct {
	spans []span
	i     int
}

func (c *spanCursor) overlaps(o, e int64) bool {
	for c.i < len(c.spans) && c.spans[c.i].end <= o {
		c.i++
	}
	return c.i < len(c.spans) && c.spans[c.i].start < e
}

// extentCursor maps ascending block ranges to physical segments.
type extentCursor struct {
	exts []extent
	i    int
	segs []segment
}

// segment says the bytes [start, end) are at physical offset start+delta.
type segment struct{ start, end, delta int64 }

// mapping returns the physical segments covering [o, e), merged where
// adjacent, or false when part of the range has no trusted extent.
func (c *extentCursor) mapping(o, e int64) ([]segment, bool) {
	for c.i < len(c.exts) && c.exts[c.i].logical+c.exts[c.i].length <= o {
		c.i++
	}
	c.segs = c.segs[:0]
	pos := o
	for j := c.i; j < len(c.exts) && pos < e; j++ {
		x := c.exts[j]
		if x.logical > pos {
			return nil, false // a gap
		}
		end := min(x.logical+x.length, e)
		d := x.physical - x.logical
		if n := len(c.segs); n > 0 && c.segs[n-1].delta == d && c.segs[n-1].end == pos {
			c.segs[n-1].end = end
		} else {
			c.segs = append(c.segs, segment{pos, end, d})
		}
		pos = end
	}
	return c.segs, pos >= e
}

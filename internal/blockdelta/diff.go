package blockdelta

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Options configures Diff.
type Options struct {
	// BlockSize is the unit of comparison and of the records; 0 means
	// DefaultBlockSize. It must be a power of two in [MinBlockSize,
	// MaxBlockSize].
	BlockSize int
	// BaseID identifies the base image (for example the template id and its
	// content digest). The stream carries its digest and Apply refuses a base
	// given another id.
	BaseID string
	// NoExtentMap disables the FIEMAP fast path, so that every block with data
	// is read and compared (for tests and benchmarks).
	NoExtentMap bool
}

// Stats describes one Diff or Apply.
type Stats struct {
	// BlockSize, ImageSize and BaseSize are the stream's header fields.
	BlockSize int
	ImageSize int64
	BaseSize  int64
	// BlocksHole counts blocks that are holes in both files (never read).
	// Only blocks inside a data range of either file are counted at all.
	BlocksHole int64
	// BlocksShared counts blocks skipped because both files map them to the
	// same physical extents (FIEMAP).
	BlocksShared int64
	// BlocksCompared counts blocks read and compared byte for byte.
	BlocksCompared int64
	// BytesRead counts the bytes Diff read from the image and the base.
	BytesRead int64
	// ExtentMap reports whether Diff used the FIEMAP fast path.
	ExtentMap bool
	// DataRecords and ZeroRecords count the records in the stream.
	DataRecords int64
	ZeroRecords int64
	// StreamBytes is the length of the stream written or read.
	StreamBytes int64
	// BytesWritten counts the image bytes Apply wrote (data records).
	BytesWritten int64
}

// Diff writes to w the stream that turns base into image (see the package
// documentation for the format) and returns what it did. Neither file may
// change while Diff runs. The files' offsets are not used.
func Diff(ctx context.Context, base, image *os.File, w io.Writer, opts Options) (Stats, error) {
	bs := opts.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	if !validBlockSize(bs) {
		return Stats{}, fmt.Errorf("blockdelta: block size %d: want a power of two in [%d, %d]: %w", bs, MinBlockSize, MaxBlockSize, errdefs.ErrInvalidArgument)
	}
	d, err := newDiffer(base, image, bs, !opts.NoExtentMap)
	if err != nil {
		return Stats{}, err
	}
	enc := newEncoder(w)
	h := header{blockSize: bs, imageSize: d.st.ImageSize, baseSize: d.st.BaseSize, baseID: BaseDigest(opts.BaseID)}
	if err := enc.write(h.marshal()); err != nil {
		return d.st, err
	}
	err = d.run(ctx, enc)
	if err == nil {
		err = enc.finish()
	}
	d.st.StreamBytes = enc.n
	return d.st, err
}

// differ holds the state of one Diff.
type differ struct {
	base, image    *os.File
	bs             int64
	st             Stats
	candidates     []span // block-aligned ranges where either file has data
	imgData        spanCursor
	baseData       spanCursor
	imgExt, baseEx *extentCursor // nil without the FIEMAP fast path
	ibuf, bbuf     []byte
}

func newDiffer(base, image *os.File, bs int, useExtents bool) (*differ, error) {
	d := &differ{base: base, image: image, bs: int64(bs), ibuf: make([]byte, bs), bbuf: make([]byte, bs)}
	d.st.BlockSize = bs
	for _, x := range []struct {
		f    *os.File
		size *int64
	}{{image, &d.st.ImageSize}, {base, &d.st.BaseSize}} {
		fi, err := x.f.Stat()
		if err != nil {
			return nil, fmt.Errorf("blockdelta: stat %s: %w", x.f.Name(), err)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("blockdelta: %s is not a regular file: %w", x.f.Name(), errdefs.ErrInvalidArgument)
		}
		*x.size = fi.Size()
	}
	imgSpans, err := dataSpans(image, d.st.ImageSize)
	if err != nil {
		return nil, err
	}
	baseSpans, err := dataSpans(base, min(d.st.BaseSize, d.st.ImageSize))
	if err != nil {
		return nil, err
	}
	d.imgData, d.baseData = spanCursor{spans: imgSpans}, spanCursor{spans: baseSpans}
	d.candidates = mergeAligned(imgSpans, baseSpans, d.bs, d.st.ImageSize)
	if useExtents && sameMount(base, image) {
		ie, ierr := fiemap(image, d.st.ImageSize)
		be, berr := fiemap(base, d.st.BaseSize)
		if ierr == nil && berr == nil {
			d.imgExt, d.baseEx = &extentCursor{exts: ie}, &extentCursor{exts: be}
			d.st.ExtentMap = true
		}
	}
	return d, nil
}

// mergeAligned returns the union of a and b, widened to block boundaries and
// clipped to size.
func mergeAligned(a, b []span, bs, size int64) []span {
	var out []span
	add := func(s span) {
		s.start = s.start / bs * bs
		s.end = min((s.end+bs-1)/bs*bs, size)
		if s.start >= s.end {
			return
		}
		if n := len(out); n > 0 && s.start <= out[n-1].end {
			out[n-1].end = max(out[n-1].end, s.end)
			return
		}
		out = append(out, s)
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j >= len(b) || (i < len(a) && a[i].start <= b[j].start) {
			add(a[i])
			i++
		} else {
			add(b[j])
			j++
		}
	}
	return out
}

func (d *differ) run(ctx context.Context, enc *encoder) error {
	for _, c := range d.candidates {
		for o := c.start; o < c.end; o += d.bs {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("blockdelta: diff %s: %w", d.image.Name(), err)
			}
			if err := d.block(enc, o, min(o+d.bs, d.st.ImageSize)); err != nil {
				return err
			}
		}
	}
	return nil
}

// block handles the block [o, e): nothing when it equals the base, else one
// record.
func (d *differ) block(enc *encoder, o, e int64) error {
	imgData := d.imgData.overlaps(o, e)
	baseEnd := min(e, d.st.BaseSize)
	baseData := o < baseEnd && d.baseData.overlaps(o, baseEnd)
	switch {
	case !imgData && !baseData:
		d.st.BlocksHole++
		return nil
	case !imgData:
		// The image reads as zeros where the base has data: a zero record
		// is cheaper than reading the base to see whether it is zero too.
		d.st.ZeroRecords++
		return enc.record(kindZero, o, int(e-o), nil)
	case d.shared(o, e):
		d.st.BlocksShared++
		return nil
	}
	n := int(e - o)
	img, ref := d.ibuf[:n], d.bbuf[:n]
	if err := d.read(d.image, img, o); err != nil {
		return err
	}
	clear(ref)
	if baseData {
		if err := d.read(d.base, ref[:baseEnd-o], o); err != nil {
			return err
		}
	}
	d.st.BlocksCompared++
	if bytes.Equal(img, ref) {
		return nil
	}
	if allZero(img) {
		d.st.ZeroRecords++
		return enc.record(kindZero, o, n, nil)
	}
	d.st.DataRecords++
	return enc.record(kindData, o, n, img)
}

// shared reports whether [o, e) maps to the same physical bytes in both files.
func (d *differ) shared(o, e int64) bool {
	if d.imgExt == nil || e > d.st.BaseSize {
		return false
	}
	a, ok := d.imgExt.mapping(o, e)
	if !ok {
		return false
	}
	b, ok := d.baseEx.mapping(o, e)
	if !ok || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (d *differ) read(f *os.File, buf []byte, off int64) error {
	n, err := f.ReadAt(buf, off)
	d.st.BytesRead += int64(n)
	if err != nil {
		// A short read means the file shrank under Diff.
		return fmt.Errorf("blockdelta: read %s at %d: %w (the file must not change during a diff)", f.Name(), off, err)
	}
	return nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

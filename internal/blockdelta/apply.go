package blockdelta

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spacesandbox/space/internal/errdefs"
	"golang.org/x/sys/unix"
)

// ApplyOptions bounds what Apply accepts.
type ApplyOptions struct {
	// BaseID must equal the Options.BaseID the stream was made with.
	BaseID string
	// MaxImageSize is the largest image size the stream may declare; it must
	// be positive.
	MaxImageSize int64
	// MaxRecords bounds the number of records; 0 means one per block of the
	// declared image, the most a valid stream can hold.
	MaxRecords int64
}

// Apply rebuilds an image from base and the stream r into out, and returns
// what it did.
//
// out must be an empty regular file opened for writing, on the same
// filesystem as base when possible: Apply first clones base into it (FICLONE;
// where the filesystem cannot, a sparse copy), sets the image size, writes the
// data records and punches holes for the zero records. Every field of the
// stream is checked (the base id and size, the image size against
// MaxImageSize, record offsets aligned, in range and strictly increasing,
// lengths, the record count and the trailer digest); on any error out holds
// garbage and the caller must delete it. Out is not synced.
func Apply(ctx context.Context, base *os.File, r io.Reader, out *os.File, opts ApplyOptions) (Stats, error) {
	var st Stats
	if opts.MaxImageSize <= 0 {
		return st, fmt.Errorf("blockdelta: apply: MaxImageSize must be positive: %w", errdefs.ErrInvalidArgument)
	}
	dec := &decoder{r: bufio.NewReaderSize(r, 256<<10), sum: sha256.New()}
	h, err := dec.header()
	st.StreamBytes = dec.n
	if err != nil {
		return st, err
	}
	st.BlockSize, st.ImageSize, st.BaseSize = h.blockSize, h.imageSize, h.baseSize
	if err := checkHeader(h, base, out, opts); err != nil {
		return st, err
	}
	if err := cloneInto(out, base, h.baseSize); err != nil {
		return st, err
	}
	if err := out.Truncate(h.imageSize); err != nil {
		return st, fmt.Errorf("blockdelta: apply: size %s to %d: %w", out.Name(), h.imageSize, err)
	}
	maxRecords := (h.imageSize + int64(h.blockSize) - 1) / int64(h.blockSize)
	if opts.MaxRecords > 0 {
		maxRecords = min(maxRecords, opts.MaxRecords)
	}
	err = applyRecords(ctx, dec, h, out, maxRecords, &st)
	st.StreamBytes = dec.n
	return st, err
}

// checkHeader compares the header with the caller's expectations before
// anything is written.
func checkHeader(h header, base, out *os.File, opts ApplyOptions) error {
	if h.imageSize > opts.MaxImageSize {
		return fmt.Errorf("blockdelta: apply: image size %d exceeds the limit %d: %w", h.imageSize, opts.MaxImageSize, errdefs.ErrInvalidArgument)
	}
	want := BaseDigest(opts.BaseID)
	if subtle.ConstantTimeCompare(h.baseID[:], want[:]) != 1 {
		return fmt.Errorf("blockdelta: apply: the stream was made against another base than %q: %w", opts.BaseID, errdefs.ErrFailedPrecondition)
	}
	fi, err := base.Stat()
	if err != nil {
		return fmt.Errorf("blockdelta: apply: stat base %s: %w", base.Name(), err)
	}
	if !fi.Mode().IsRegular() || fi.Size() != h.baseSize {
		return fmt.Errorf("blockdelta: apply: base %s has %d bytes, the stream was made against %d: %w", base.Name(), fi.Size(), h.baseSize, errdefs.ErrFailedPrecondition)
	}
	fo, err := out.Stat()
	if err != nil {
		return fmt.Errorf("blockdelta: apply: stat %s: %w", out.Name(), err)
	}
	if !fo.Mode().IsRegular() || fo.Size() != 0 {
		return fmt.Errorf("blockdelta: apply: output %s must be an empty regular file: %w", out.Name(), errdefs.ErrInvalidArgument)
	}
	return nil
}

func applyRecords(ctx context.Context, dec *decoder, h header, out *os.File, maxRecords int64, st *Stats) error {
	buf := make([]byte, h.blockSize)
	next := int64(0) // the lowest offset the next record may have
	for count := int64(0); ; count++ {
		if count%256 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("blockdelta: apply: %w", err)
			}
		}
		kind, off, length, err := dec.record()
		if err != nil {
			return err
		}
		if kind == kindEnd {
			return dec.trailer(uint64(count))
		}
		if count >= maxRecords {
			return fmt.Errorf("blockdelta: apply: more than %d records: %w", maxRecords, errdefs.ErrInvalidArgument)
		}
		if err := checkRecord(h, kind, off, length, next); err != nil {
			return err
		}
		next = off + int64(length)
		if kind == kindZero {
			st.ZeroRecords++
			if err := zeroRange(out, off, int64(length)); err != nil {
				return err
			}
			continue
		}
		st.DataRecords++
		if err := dec.full(buf[:length]); err != nil {
			return err
		}
		if _, err := out.WriteAt(buf[:length], off); err != nil {
			return fmt.Errorf("blockdelta: apply: write %s at %d: %w", out.Name(), off, err)
		}
		st.BytesWritten += int64(length)
	}
}

func checkRecord(h header, kind byte, off int64, length uint32, next int64) error {
	bs := int64(h.blockSize)
	switch {
	case kind != kindData && kind != kindZero:
		return fmt.Errorf("blockdelta: apply: unknown record kind %d: %w", kind, errdefs.ErrInvalidArgument)
	case off < next:
		return fmt.Errorf("blockdelta: apply: record at %d overlaps or precedes the previous one (next allowed %d): %w", off, next, errdefs.ErrInvalidArgument)
	case off%bs != 0:
		return fmt.Errorf("blockdelta: apply: record offset %d not aligned to the block size %d: %w", off, bs, errdefs.ErrInvalidArgument)
	case off >= h.imageSize:
		return fmt.Errorf("blockdelta: apply: record offset %d beyond the image size %d: %w", off, h.imageSize, errdefs.ErrInvalidArgument)
	case int64(length) != min(bs, h.imageSize-off):
		return fmt.Errorf("blockdelta: apply: record at %d has length %d, want %d: %w", off, length, min(bs, h.imageSize-off), errdefs.ErrInvalidArgument)
	}
	return nil
}

// zeroRange makes [off, off+n) of f read as zeros: a punched hole, or written
// zeros where the filesystem cannot punch.
func zeroRange(f *os.File, off, n int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("blockdelta: apply: punch hole in %s at %d: %w", f.Name(), off, err)
	}
	if _, err := f.WriteAt(make([]byte, n), off); err != nil {
		return fmt.Errorf("blockdelta: apply: zero %s at %d: %w", f.Name(), off, err)
	}
	return nil
}

// cloneInto makes the empty file out a copy of base's first size bytes: a
// reflink where the filesystem allows, else a copy that keeps holes.
func cloneInto(out, base *os.File, size int64) error {
	if err := unix.IoctlFileClone(int(out.Fd()), int(base.Fd())); err == nil {
		return nil
	}
	spans, err := dataSpans(base, size)
	if err != nil {
		return err
	}
	for _, s := range spans {
		if err := copySpan(out, base, s); err != nil {
			return err
		}
	}
	return out.Truncate(size)
}

// copySpan copies the bytes s of base into out at the same offset, in the
// kernel where it can (copy_file_range), else through a buffer.
func copySpan(out, base *os.File, s span) error {
	in, o := s.start, s.start
	for in < s.end {
		n, err := unix.CopyFileRange(int(base.Fd()), &in, int(out.Fd()), &o, int(min(s.end-in, 1<<30)), 0)
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			w := io.NewOffsetWriter(out, in)
			if _, err := io.Copy(w, io.NewSectionReader(base, in, s.end-in)); err != nil {
				return fmt.Errorf("blockdelta: apply: copy base %s into %s: %w", base.Name(), out.Name(), err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("blockdelta: apply: copy base %s into %s: %w", base.Name(), out.Name(), err)
		}
		if n == 0 {
			return fmt.Errorf("blockdelta: apply: base %s shrank while copying: %w", base.Name(), errdefs.ErrFailedPrecondition)
		}
	}
	return nil
}

// decoder reads a stream and keeps its running digest.
type decoder struct {
	r   *bufio.Reader
	sum hashWriter
	n   int64
	rec [recordHeaderLen]byte
}

// full reads len(b) bytes into b and adds them to the digest.
func (d *decoder) full(b []byte) error {
	n, err := io.ReadFull(d.r, b)
	d.n += int64(n)
	d.sum.Write(b[:n])
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("blockdelta: stream truncated at byte %d: %w", d.n, errdefs.ErrInvalidArgument)
		}
		return fmt.Errorf("blockdelta: read stream: %w", err)
	}
	return nil
}

func (d *decoder) header() (header, error) {
	b := make([]byte, headerLen)
	if err := d.full(b); err != nil {
		return header{}, err
	}
	return parseHeader(b)
}

// record reads a record header, or the end marker (kind kindEnd).
func (d *decoder) record() (kind byte, off int64, length uint32, err error) {
	if err := d.full(d.rec[:1]); err != nil {
		return 0, 0, 0, err
	}
	if d.rec[0] == kindEnd {
		return kindEnd, 0, 0, nil
	}
	if err := d.full(d.rec[1:]); err != nil {
		return 0, 0, 0, err
	}
	o := binary.BigEndian.Uint64(d.rec[1:])
	if o > 1<<62 {
		return 0, 0, 0, fmt.Errorf("blockdelta: apply: record offset %d out of range: %w", o, errdefs.ErrInvalidArgument)
	}
	return d.rec[0], int64(o), binary.BigEndian.Uint32(d.rec[9:]), nil
}

// trailer reads the record count and the digest after the end marker, checks
// both and that nothing follows.
func (d *decoder) trailer(records uint64) error {
	var b [8]byte
	if err := d.full(b[:]); err != nil {
		return err
	}
	if got := binary.BigEndian.Uint64(b[:]); got != records {
		return fmt.Errorf("blockdelta: apply: trailer counts %d records, the stream has %d: %w", got, records, errdefs.ErrInvalidArgument)
	}
	want := d.sum.Sum(nil)
	var got [sha256.Size]byte
	n, err := io.ReadFull(d.r, got[:])
	d.n += int64(n)
	if err != nil {
		return fmt.Errorf("blockdelta: apply: stream truncated in its trailer: %w", errdefs.ErrInvalidArgument)
	}
	if subtle.ConstantTimeCompare(got[:], want) != 1 {
		return fmt.Errorf("blockdelta: apply: stream digest mismatch (corrupt or altered stream): %w", errdefs.ErrInvalidArgument)
	}
	switch _, err := d.r.ReadByte(); {
	case err == nil:
		return fmt.Errorf("blockdelta: apply: data after the stream trailer: %w", errdefs.ErrInvalidArgument)
	case !errors.Is(err, io.EOF):
		return fmt.Errorf("blockdelta: read stream: %w", err)
	}
	return nil
}

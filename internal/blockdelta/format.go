package blockdelta

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Version is the stream format version Diff writes and Apply reads.
const Version = 1

// DefaultBlockSize is the block size Diff uses when Options.BlockSize is 0.
const DefaultBlockSize = 64 << 10

// The bounds of a block size, in Options and in a stream.
const (
	MinBlockSize = 4 << 10
	MaxBlockSize = 4 << 20
)

var magic = [8]byte{'S', 'P', 'A', 'C', 'E', 'B', 'L', 'K'}

const (
	headerLen       = 64
	recordHeaderLen = 13
	trailerLen      = 8 + sha256.Size
)

// Record kinds.
const (
	kindData byte = 1
	kindZero byte = 2
	kindEnd  byte = 0xFF
)

// header is the decoded stream header.
type header struct {
	blockSize int
	imageSize int64
	baseSize  int64
	baseID    [sha256.Size]byte
}

// BaseDigest is the digest a stream carries for the base identity id.
func BaseDigest(id string) [sha256.Size]byte {
	return sha256.Sum256([]byte("space/blockdelta base\x00" + id))
}

func validBlockSize(bs int) bool {
	return bs >= MinBlockSize && bs <= MaxBlockSize && bs&(bs-1) == 0
}

func (h header) marshal() []byte {
	b := make([]byte, headerLen)
	copy(b, magic[:])
	binary.BigEndian.PutUint16(b[8:], Version)
	binary.BigEndian.PutUint16(b[10:], 0)
	binary.BigEndian.PutUint32(b[12:], uint32(h.blockSize))
	binary.BigEndian.PutUint64(b[16:], uint64(h.imageSize))
	binary.BigEndian.PutUint64(b[24:], uint64(h.baseSize))
	copy(b[32:], h.baseID[:])
	return b
}

// parseHeader decodes and checks the fields of a header that do not depend on
// the caller's expectations.
func parseHeader(b []byte) (header, error) {
	var h header
	if !bytes.Equal(b[:8], magic[:]) {
		return h, fmt.Errorf("blockdelta: not a block delta stream (bad magic %q): %w", b[:8], errdefs.ErrInvalidArgument)
	}
	if v := binary.BigEndian.Uint16(b[8:]); v != Version {
		return h, fmt.Errorf("blockdelta: stream version %d, this binary reads %d: %w", v, Version, errdefs.ErrInvalidArgument)
	}
	if f := binary.BigEndian.Uint16(b[10:]); f != 0 {
		return h, fmt.Errorf("blockdelta: unknown header flags %#x: %w", f, errdefs.ErrInvalidArgument)
	}
	bs := binary.BigEndian.Uint32(b[12:])
	if !validBlockSize(int(bs)) {
		return h, fmt.Errorf("blockdelta: block size %d: want a power of two in [%d, %d]: %w", bs, MinBlockSize, MaxBlockSize, errdefs.ErrInvalidArgument)
	}
	img, base := binary.BigEndian.Uint64(b[16:]), binary.BigEndian.Uint64(b[24:])
	if img > 1<<62 || base > 1<<62 {
		return h, fmt.Errorf("blockdelta: image size %d or base size %d out of range: %w", img, base, errdefs.ErrInvalidArgument)
	}
	h.blockSize, h.imageSize, h.baseSize = int(bs), int64(img), int64(base)
	copy(h.baseID[:], b[32:64])
	return h, nil
}

// encoder writes a stream and keeps its running digest.
type encoder struct {
	w       io.Writer
	sum     hashWriter
	n       int64
	records uint64
	rec     [recordHeaderLen]byte
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

func newEncoder(w io.Writer) *encoder {
	return &encoder{w: w, sum: sha256.New()}
}

func (e *encoder) write(b []byte) error {
	e.sum.Write(b)
	n, err := e.w.Write(b)
	e.n += int64(n)
	if err != nil {
		return fmt.Errorf("blockdelta: write stream: %w", err)
	}
	return nil
}

// record writes one record; data is nil for a zero record.
func (e *encoder) record(kind byte, off int64, length int, data []byte) error {
	e.rec[0] = kind
	binary.BigEndian.PutUint64(e.rec[1:], uint64(off))
	binary.BigEndian.PutUint32(e.rec[9:], uint32(length))
	if err := e.write(e.rec[:]); err != nil {
		return err
	}
	e.records++
	if kind == kindData {
		return e.write(data[:length])
	}
	return nil
}

// finish writes the end marker and the trailer.
func (e *encoder) finish() error {
	var b [1 + 8]byte
	b[0] = kindEnd
	binary.BigEndian.PutUint64(b[1:], e.records)
	if err := e.write(b[:]); err != nil {
		return err
	}
	sum := e.sum.Sum(nil)
	n, err := e.w.Write(sum)
	e.n += int64(n)
	if err != nil {
		return fmt.Errorf("blockdelta: write stream trailer: %w", err)
	}
	return nil
}

package gateway

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
)

// maxFrame bounds a frame on a stream link: the MTU, an Ethernet header and
// a VLAN tag, with room to spare. A bigger length prefix ends the link (its
// framing can no longer be trusted). A frame of up to maxFrame bytes, or any
// frame on a tap, reaches admitFrame, which refuses and counts one longer
// than the MTU allows.
const maxFrame = 1500 + 14 + 4 + 64

// frameIO reads and writes whole Ethernet frames on a link.
type frameIO interface {
	// ReadFrame returns the next frame in buf's storage.
	ReadFrame(buf []byte) ([]byte, error)
	// WriteFrame sends one frame. Safe for concurrent use.
	WriteFrame(frame []byte) error
	Close() error
}

func newFrameIO(l *driver.Link) (frameIO, error) {
	if l == nil || l.File == nil {
		return nil, errors.New("gateway: no link")
	}
	if l.Framing != driver.FramingTap && l.Framing != driver.FramingStream {
		return nil, fmt.Errorf("gateway: unknown link framing %q", l.Framing)
	}
	f, err := pollable(l.File)
	if err != nil {
		return nil, err
	}
	if l.Framing == driver.FramingTap {
		return &tapIO{f: f}, nil
	}
	return &streamIO{f: f, r: bufio.NewReaderSize(f, 64<<10)}, nil
}

// pollable returns f in non-blocking mode, read through Go's poller, so that
// Close interrupts a pending read (a blocking fd would keep its reader, and
// the link, forever). A blocking f is replaced by a non-blocking duplicate.
func pollable(f *os.File) (*os.File, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("gateway: link: %w", err)
	}
	nonblock := false
	if cerr := sc.Control(func(fd uintptr) {
		var flags int
		flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0)
		nonblock = flags&unix.O_NONBLOCK != 0
	}); cerr != nil {
		return nil, fmt.Errorf("gateway: link: %w", cerr)
	}
	if err != nil {
		return nil, fmt.Errorf("gateway: link: %w", err)
	}
	if nonblock {
		return f, nil
	}
	dup, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, fmt.Errorf("gateway: link: dup: %w", err)
	}
	unix.CloseOnExec(dup)
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("gateway: link: %w", err)
	}
	nf := os.NewFile(uintptr(dup), f.Name())
	f.Close()
	return nf, nil
}

// tapIO: one read is one frame, one write is one frame.
type tapIO struct{ f *os.File }

func (t *tapIO) ReadFrame(buf []byte) ([]byte, error) {
	n, err := t.f.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func (t *tapIO) WriteFrame(frame []byte) error {
	_, err := t.f.Write(frame)
	return err
}

func (t *tapIO) Close() error { return t.f.Close() }

// streamIO: each frame is preceded by its length, 4 bytes big-endian (QEMU's
// -netdev stream).
type streamIO struct {
	f  *os.File
	r  *bufio.Reader
	mu sync.Mutex
}

func (s *streamIO) ReadFrame(buf []byte) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(s.r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n == 0 || n > maxFrame || int(n) > len(buf) {
		return nil, fmt.Errorf("gateway: link frame of %d bytes (at most %d): framing lost", n, maxFrame)
	}
	if _, err := io.ReadFull(s.r, buf[:n]); err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func (s *streamIO) WriteFrame(frame []byte) error {
	out := make([]byte, 4+len(frame))
	binary.BigEndian.PutUint32(out, uint32(len(frame)))
	copy(out[4:], frame)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.f.Write(out)
	return err
}

func (s *streamIO) Close() error { return s.f.Close() }

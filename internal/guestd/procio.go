package guestd

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
)

// processIO holds both ends of a process's stdio: pipes, or a PTY.
//
// The parent's ends stay non-blocking and registered with Go's poller, so
// closing them interrupts a blocked read or write; the child's ends are made
// blocking, as programs expect. The PTY is opened with x/sys/unix rather than
// creack/pty because pty.Open calls (*os.File).Fd on the master, which turns
// it blocking and makes a stuck reader impossible to interrupt.
type processIO struct {
	master *os.File // PTY master; nil for pipes
	slave  *os.File

	stdinR, stdinW   *os.File
	stdoutR, stdoutW *os.File
	stderrR, stderrW *os.File
	devNull          *os.File
}

type outputReader struct {
	f    *os.File
	wrap func([]byte) *processv1.ProcessEvent_DataEvent
}

func newProcessIO(pty *processv1.PTY, stdin bool) (*processIO, error) {
	io := &processIO{}
	if pty != nil {
		master, slave, err := openPTY()
		if err != nil {
			return nil, err
		}
		io.master, io.slave = master, slave
		cols, rows := pty.GetSize().GetCols(), pty.GetSize().GetRows()
		if cols == 0 || rows == 0 {
			cols, rows = 80, 24
		}
		if err := resizePTY(master, cols, rows); err != nil {
			io.closeChildEnds()
			io.closeParentEnds()
			return nil, err
		}
		return io, nil
	}
	var err error
	defer func() {
		if err != nil {
			io.closeChildEnds()
			io.closeParentEnds()
		}
	}()
	if stdin {
		if io.stdinR, io.stdinW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("stdin pipe: %w", err)
		}
	} else if io.devNull, err = os.Open(os.DevNull); err != nil {
		return nil, fmt.Errorf("open %s for stdin: %w", os.DevNull, err)
	}
	if io.stdoutR, io.stdoutW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	if io.stderrR, io.stderrW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	return io, nil
}

// childFds returns the child's stdin, stdout and stderr; Fd makes them blocking.
func (io *processIO) childFds() []uintptr {
	if io.master != nil {
		fd := io.slave.Fd()
		return []uintptr{fd, fd, fd}
	}
	in := io.devNull
	if io.stdinR != nil {
		in = io.stdinR
	}
	return []uintptr{in.Fd(), io.stdoutW.Fd(), io.stderrW.Fd()}
}

func (io *processIO) readers() []outputReader {
	if io.master != nil {
		return []outputReader{{io.master, func(b []byte) *processv1.ProcessEvent_DataEvent {
			return &processv1.ProcessEvent_DataEvent{Output: &processv1.ProcessEvent_DataEvent_Pty{Pty: b}}
		}}}
	}
	return []outputReader{
		{io.stdoutR, func(b []byte) *processv1.ProcessEvent_DataEvent {
			return &processv1.ProcessEvent_DataEvent{Output: &processv1.ProcessEvent_DataEvent_Stdout{Stdout: b}}
		}},
		{io.stderrR, func(b []byte) *processv1.ProcessEvent_DataEvent {
			return &processv1.ProcessEvent_DataEvent{Output: &processv1.ProcessEvent_DataEvent_Stderr{Stderr: b}}
		}},
	}
}

func (io *processIO) closeChildEnds() {
	closeFiles(io.slave, io.stdinR, io.stdoutW, io.stderrW, io.devNull)
}

func (io *processIO) closeReaders() { closeFiles(io.master, io.stdoutR, io.stderrR) }

func (io *processIO) closeParentEnds() { closeFiles(io.master, io.stdinW, io.stdoutR, io.stderrR) }

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close() // a second close only reports os.ErrClosed
		}
	}
}

// openPTY opens a PTY pair; the master is non-blocking and poller-managed.
func openPTY() (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	master = os.NewFile(uintptr(mfd), "/dev/ptmx")
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err == nil {
		err = unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0)
	}
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	name := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	return master, os.NewFile(uintptr(sfd), name), nil
}

// resizePTY sets the terminal size without touching the master's blocking mode.
func resizePTY(master *os.File, cols, rows uint32) error {
	if cols > 0xffff || rows > 0xffff {
		return fmt.Errorf("pty size %dx%d: larger than 65535: %w", cols, rows, errBadRequest)
	}
	rc, err := master.SyscallConn()
	if err != nil {
		return fmt.Errorf("resize pty: %w", err)
	}
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
	})
	if err == nil {
		err = ioErr
	}
	if err != nil {
		return fmt.Errorf("resize pty to %dx%d: %w", cols, rows, err)
	}
	return nil
}

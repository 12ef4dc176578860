package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/guestd"
)

// serveFD serves the stream inherited on fd (a socketpair end from the ns
// runtime) until it ends.
func serveFD(ctx context.Context, arg string, cfg guestd.Config, log *slog.Logger) error {
	n, err := strconv.Atoi(arg)
	if err != nil || n < 3 {
		return fmt.Errorf("channel fd:%s: want a descriptor number of 3 or more", arg)
	}
	// Children must not inherit the channel.
	unix.CloseOnExec(n)
	f := os.NewFile(uintptr(n), "guest-channel")
	conn, err := net.FileConn(f)
	if err == nil {
		f.Close()
	} else {
		conn = newFileConn(f) // a pipe or character device, not a socket
	}
	return guestd.Serve(ctx, conn, cfg, log)
}

// serveUnix listens on path and serves one connection at a time; the process
// table survives from one connection to the next.
func serveUnix(ctx context.Context, path string, cfg guestd.Config, log *slog.Logger) error {
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("channel unix:%s: %w", path, err)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	d := guestd.New(cfg, log)
	defer d.Close()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("channel unix:%s: accept: %w", path, err)
		}
		if err := d.ServeConn(ctx, conn); err != nil {
			return err
		}
	}
}

// serveVirtio serves the virtio-serial port called name. The port outlives a
// host-side disconnect, so the daemon opens it again after each session, and
// a restarted host bridge can talk to the same daemon.
//
// Each session starts only once a host is connected (waitHost), and ends when
// that host leaves: a read then gives end of file. This is also how a VM
// restored from a snapshot finds its new host: the restored port reports the
// old host gone, the daemon ends the session it was saved in (whatever was
// left of it is discarded with the closed port) and waits for the new one.
func serveVirtio(ctx context.Context, sysDir, devDir, name string, cfg guestd.Config, log *slog.Logger) error {
	d := guestd.New(cfg, log)
	defer d.Close()
	for ctx.Err() == nil {
		dev, err := findVirtioPort(sysDir, devDir, name)
		if err != nil {
			return err
		}
		f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("channel virtio:%s: open %s: %w", name, dev, err)
		}
		if err := waitHost(ctx, f); err != nil {
			f.Close()
			return fmt.Errorf("channel virtio:%s: %w", name, err)
		}
		// A new host may mean this VM was just restored from a snapshot,
		// with the RNG state of every other copy: reseed before serving.
		if err := reseedFromHost(ctx, hwrngDevice); err != nil {
			log.Warn("reseed the kernel RNG from the host's virtio RNG", "err", err)
		}
		if err := d.ServeConn(ctx, newFileConn(f)); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// hostPollInterval is how often waitHost looks for a host.
const hostPollInterval = 10 * time.Millisecond

// waitHost returns once the host end of the open port f is connected: until
// then poll reports POLLHUP. The port stays open meanwhile, so the host sees
// the guest waiting and nothing it sends is lost.
func waitHost(ctx context.Context, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	for {
		hup, err := pollHup(rc)
		if err != nil {
			return err
		}
		if !hup {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(hostPollInterval):
		}
	}
}

// pollHup reports whether poll(2) says the other end of the descriptor is
// gone, without blocking.
func pollHup(rc syscall.RawConn) (bool, error) {
	var revents int16
	var perr error
	err := rc.Control(func(fd uintptr) {
		for {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			_, perr = unix.Poll(fds, 0)
			if !errors.Is(perr, unix.EINTR) {
				revents = fds[0].Revents
				return
			}
		}
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return false, fmt.Errorf("poll: %w", err)
	}
	return revents&unix.POLLHUP != 0, nil
}

// hwrngDevice is the guest's hardware RNG: QEMU's virtio-rng, fed from the
// host's /dev/urandom.
const hwrngDevice = "/dev/hwrng"

// Kernel RNG ioctls (include/uapi/linux/random.h).
const (
	rndAddEntropy  = 0x40085203 // RNDADDENTROPY, _IOW('R', 0x03, int[2])
	rndReseedCRNG  = 0x5207     // RNDRESEEDCRNG, _IO('R', 0x07)
	reseedBytes    = 64
	reseedDeadline = 2 * time.Second
)

// reseedFromHost mixes fresh bytes from the host's RNG device into the
// kernel's input pool and makes the kernel reseed its CRNG from it at once.
// Crediting entropy alone does not reseed a CRNG that is already initialised
// (Linux 5.18 and later reseed on a timer of up to a minute), and every copy
// restored from one snapshot starts with the same CRNG state: without the
// forced reseed two sandboxes would read the same /dev/urandom bytes.
func reseedFromHost(ctx context.Context, device string) error {
	f, err := os.Open(device)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, reseedBytes)
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(f, buf)
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(reseedDeadline):
		err = fmt.Errorf("%s gave no %d bytes within %s", device, reseedBytes, reseedDeadline)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", device, err)
	}
	return addEntropyAndReseed(buf)
}

// addEntropyAndReseed credits b to the kernel's input pool (RNDADDENTROPY)
// and forces a CRNG reseed (RNDRESEEDCRNG); both need CAP_SYS_ADMIN.
func addEntropyAndReseed(b []byte) error {
	rnd, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer rnd.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(b)+3)
	binary.NativeEndian.PutUint32(info[0:4], uint32(len(b)*8))
	binary.NativeEndian.PutUint32(info[4:8], uint32(len(b)))
	copy(info[8:], b)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, rnd.Fd(), rndAddEntropy, uintptr(unsafe.Pointer(&info[0]))); errno != 0 {
		return fmt.Errorf("RNDADDENTROPY: %w", errno)
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, rnd.Fd(), rndReseedCRNG, 0); errno != 0 {
		return fmt.Errorf("RNDRESEEDCRNG: %w", errno)
	}
	return nil
}

// findVirtioPort returns the device of the port whose sysfs name is name.
func findVirtioPort(sysDir, devDir, name string) (string, error) {
	dirs, err := filepath.Glob(filepath.Join(sysDir, "*", "name"))
	if err != nil {
		return "", err
	}
	for _, nameFile := range dirs {
		b, err := os.ReadFile(nameFile)
		if err != nil {
			continue
		}
		if strings.TrimSpace(string(b)) == name {
			return filepath.Join(devDir, filepath.Base(filepath.Dir(nameFile))), nil
		}
	}
	return "", fmt.Errorf("channel virtio:%s: no port with that name under %s: %w", name, sysDir, os.ErrNotExist)
}

// fileConn is a net.Conn over a file that is not a socket (a virtio-serial
// character device or a pipe).
type fileConn struct {
	f *os.File
}

func newFileConn(f *os.File) net.Conn { return &fileConn{f: f} }

func (c *fileConn) Read(b []byte) (int, error)  { return c.f.Read(b) }
func (c *fileConn) Write(b []byte) (int, error) { return c.f.Write(b) }
func (c *fileConn) Close() error                { return c.f.Close() }
func (c *fileConn) LocalAddr() net.Addr         { return fileAddr(c.f.Name()) }
func (c *fileConn) RemoteAddr() net.Addr        { return fileAddr(c.f.Name()) }

func (c *fileConn) SetDeadline(t time.Time) error      { return noDeadline(c.f.SetDeadline(t)) }
func (c *fileConn) SetReadDeadline(t time.Time) error  { return noDeadline(c.f.SetReadDeadline(t)) }
func (c *fileConn) SetWriteDeadline(t time.Time) error { return noDeadline(c.f.SetWriteDeadline(t)) }

// noDeadline ignores the error of a file that cannot have deadlines (not
// poller-managed): HTTP/2 then runs without them, as on a blocking stream.
func noDeadline(err error) error {
	if errors.Is(err, os.ErrNoDeadline) {
		return nil
	}
	return err
}

type fileAddr string

func (a fileAddr) Network() string { return "file" }
func (a fileAddr) String() string  { return string(a) }

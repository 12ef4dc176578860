package guestd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
)

// maxEntropyBytes bounds one reseed (the kernel caps a pool write lower anyway).
const maxEntropyBytes = 4096

// rndAddEntropy is RNDADDENTROPY, _IOW('R', 0x03, int[2]).
const rndAddEntropy = 0x40085203

// rndReseedCRNG is RNDRESEEDCRNG, _IO('R', 0x07): reseed the CRNG now from
// the pool. Without it Linux may keep generating from its old key for up to a
// minute, so two VMs restored from one snapshot would read the same bytes.
const rndReseedCRNG = 0x5207

// reseed mixes entropy into the kernel RNG and credits it with RNDADDENTROPY;
// without CAP_SYS_ADMIN it writes the bytes to /dev/urandom instead, which
// mixes them in without crediting.
func reseed(entropy []byte) (controlv1.ReseedMethod, error) {
	if len(entropy) > maxEntropyBytes {
		return 0, fmt.Errorf("reseed: %d bytes of entropy, at most %d: %w", len(entropy), maxEntropyBytes, errBadRequest)
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return 0, fmt.Errorf("reseed: open /dev/urandom: %w", err)
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(entropy)+3)
	binary.NativeEndian.PutUint32(info[0:4], uint32(len(entropy)*8))
	binary.NativeEndian.PutUint32(info[4:8], uint32(len(entropy)))
	copy(info[8:], entropy)
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("reseed: %w", err)
	}
	var errno unix.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, rndAddEntropy, uintptr(unsafe.Pointer(&info[0])))
	}); err != nil {
		return 0, fmt.Errorf("reseed: %w", err)
	}
	if errno == 0 {
		if err := rc.Control(func(fd uintptr) {
			_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, rndReseedCRNG, 0)
		}); err != nil {
			return 0, fmt.Errorf("reseed: %w", err)
		}
		if errno != 0 {
			return 0, fmt.Errorf("reseed: RNDRESEEDCRNG: %w", errno)
		}
		return controlv1.ReseedMethod_RESEED_METHOD_IOCTL, nil
	}
	if !errors.Is(errno, unix.EPERM) {
		return 0, fmt.Errorf("reseed: RNDADDENTROPY: %w", errno)
	}
	if _, err := f.Write(entropy); err != nil {
		return 0, fmt.Errorf("reseed: write /dev/urandom: %w", err)
	}
	return controlv1.ReseedMethod_RESEED_METHOD_WRITE, nil
}

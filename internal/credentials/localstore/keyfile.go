package localstore

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// KeyLen is the AES-256 key's length in bytes; the key file holds it as 64
// hex digits and an optional newline.
const KeyLen = 32

// GenerateKeyFile writes a fresh random key to path, mode 0600. It refuses to
// replace an existing file (ErrConflict).
func GenerateKeyFile(path string) error {
	var key [KeyLen]byte
	rand.Read(key[:])
	defer clear(key[:])
	text := []byte(hex.EncodeToString(key[:]) + "\n")
	defer clear(text)
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("key file %s exists; not replacing it: %w", path, errdefs.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("key file %s: create: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	f := os.NewFile(uintptr(fd), path)
	_, err = f.Write(text)
	err = errors.Join(err, f.Sync(), f.Close())
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("key file %s: write: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	return nil
}

// readKeyFile reads and parses the key at path: a regular file, not a link,
// readable by its owner only.
func readKeyFile(path string) ([]byte, error) {
	data, err := readPrivateFile(path, 128)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if data == nil {
		return nil, fmt.Errorf("key file %s does not exist; create one with GenerateKeyFile: %w", path, errdefs.ErrFailedPrecondition)
	}
	defer clear(data)
	key, err := parseKey(data)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return key, nil
}

// parseKey decodes 64 hex digits with an optional trailing newline.
func parseKey(data []byte) ([]byte, error) {
	text := bytes.TrimSuffix(data, []byte("\n"))
	if len(text) != 2*KeyLen {
		return nil, fmt.Errorf("want %d hex digits, found %d bytes: %w", 2*KeyLen, len(text), errdefs.ErrFailedPrecondition)
	}
	key := make([]byte, KeyLen)
	if _, err := hex.Decode(key, text); err != nil {
		clear(key)
		return nil, fmt.Errorf("not hex: %w", errdefs.ErrFailedPrecondition)
	}
	return key, nil
}

// readPrivateFile reads at most limit bytes of the regular file at path
// without following a link, refusing a file others may read. A missing file
// reads as nil.
func readPrivateFile(path string, limit int64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, nil
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%s is a symbolic link; refusing to follow it: %w", path, errdefs.ErrFailedPrecondition)
	case err != nil:
		return nil, fmt.Errorf("%s: open: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s: stat: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: not a regular file: %w", path, errdefs.ErrFailedPrecondition)
	}
	if perm := st.Mode & 0o777; perm&0o077 != 0 {
		return nil, fmt.Errorf("%s: mode %#o lets others read it; run chmod 600 on it: %w", path, perm, errdefs.ErrFailedPrecondition)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: read: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	if int64(len(data)) > limit {
		clear(data)
		return nil, fmt.Errorf("%s: larger than %d bytes: %w", path, limit, errdefs.ErrFailedPrecondition)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

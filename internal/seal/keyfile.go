package seal

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// A key file holds a key as 2*KeyLen hex digits and an optional newline.
const keyFileMax = 2*KeyLen + 2

// CreateKeyFile writes a fresh random key to path, mode 0600, without
// following a symbolic link. It never replaces a file: one at path already
// is ErrConflict (also when another process made it first).
func CreateKeyFile(path string) error {
	key := make([]byte, KeyLen)
	rand.Read(key)
	text := []byte(hex.EncodeToString(key) + "\n")
	defer clear(key)
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
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		os.Remove(path)
		return fmt.Errorf("key file %s: write: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	return nil
}

// ReadKeyFile reads the key at path (see ReadPrivateFile for what the file
// must be). A missing file is an error of class ErrFailedPrecondition that
// also matches os.ErrNotExist.
func ReadKeyFile(path string) ([]byte, error) {
	data, err := ReadPrivateFile(path, keyFileMax)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if data == nil {
		return nil, fmt.Errorf("key file %s does not exist: %w: %w", path, os.ErrNotExist, errdefs.ErrFailedPrecondition)
	}
	defer clear(data)
	key, err := parseKey(data)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return key, nil
}

// OpenKeyFile reads the key at path, creating the file first when it is
// missing: the one call for a key the program keeps for itself.
func OpenKeyFile(path string) ([]byte, error) {
	key, err := ReadKeyFile(path)
	if !errors.Is(err, os.ErrNotExist) {
		return key, err
	}
	if err := CreateKeyFile(path); err != nil && !errdefs.IsConflict(err) {
		return nil, err
	}
	return ReadKeyFile(path)
}

// parseKey decodes 2*KeyLen hex digits with an optional trailing newline.
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

// ReadPrivateFile reads at most limit bytes of the file at path. The file
// must be a regular file, not a symbolic link, with no group or other
// permission bits; anything else is refused with ErrFailedPrecondition and a
// message saying what to fix. A missing file reads as nil, nil; an empty one
// as an empty, non-nil slice.
func ReadPrivateFile(path string, limit int64) ([]byte, error) {
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
	if err := checkPrivate(fd, path); err != nil {
		return nil, err
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

// checkPrivate refuses an open file that is not a regular file or that
// the group or others may access.
func checkPrivate(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: stat: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s: not a regular file: %w", path, errdefs.ErrFailedPrecondition)
	}
	if perm := st.Mode & 0o777; perm&0o077 != 0 {
		return fmt.Errorf("%s: mode %#o lets others read it; run chmod 600 on it: %w", path, perm, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// WritePrivateFile replaces the file at path with data, mode 0600,
// atomically and durably: a temporary file in the same directory, fsync,
// rename (which replaces a symbolic link at path rather than following it),
// fsync of the directory. A reader sees the old bytes or the new, never a
// mix.
func WritePrivateFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("%s: create temporary file: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	_, err = tmp.Write(data)
	err = errors.Join(err, tmp.Chmod(0o600), tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("%s: write: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

package guestd

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
)

// A paged listing serves one directory level a page at a time, with no state
// kept in the daemon between pages: the page token carries where the last page
// stopped, as the directory's own getdents position (the d_off cookie of the
// last entry served, which the next page seeks to), and which directory it was
// (device, inode and birth time), so that a token is refused for another
// directory or for one that replaced the directory it was made for.
//
// A page costs at most pageSize entries and one getdents buffer of memory,
// however large the directory. Entries come in the directory's order, not
// sorted by name (sorting needs the whole directory). Between pages the
// listing has readdir's semantics (seekdir to a telldir cookie): an entry
// present for the whole listing is served exactly once; one added or removed
// between pages may or may not be served. The cookies are stable positions on
// btrfs, ext4 and tmpfs (since Linux 6.6).
//
// Tokens are hostile input: one that does not decode to exactly a token of
// this version is refused. The cookie in a well-formed token is not
// authenticated: a forged one can only move the listing to another position
// of a directory the caller may list anyway, and the kernel bounds-checks the
// seek.
const (
	// defaultPageSize is a page's size when the request gives none.
	defaultPageSize = 1000
	// maxPageSize bounds one page; larger requested sizes are cut to it.
	maxPageSize = 10000
	// direntBuffer is the getdents buffer of a paged listing.
	direntBuffer = 32 << 10
)

// errBadPageToken marks a page token that is malformed or for another directory.
var errBadPageToken = errors.New("bad page token")

// dirIdentity names one directory for as long as it exists.
type dirIdentity struct {
	dev, ino  uint64
	birthSec  int64
	birthNsec uint32
}

// pageToken is the decoded form of a ListDirResponse.next_page_token.
type pageToken struct {
	dir    dirIdentity
	cookie int64 // getdents d_off of the last entry served; > 0
}

const (
	pageTokenVersion = 1
	pageTokenLen     = 1 + 8 + 8 + 8 + 4 + 8
)

func (t pageToken) encode() string {
	b := make([]byte, 0, pageTokenLen)
	b = append(b, pageTokenVersion)
	b = binary.BigEndian.AppendUint64(b, t.dir.dev)
	b = binary.BigEndian.AppendUint64(b, t.dir.ino)
	b = binary.BigEndian.AppendUint64(b, uint64(t.dir.birthSec))
	b = binary.BigEndian.AppendUint32(b, t.dir.birthNsec)
	b = binary.BigEndian.AppendUint64(b, uint64(t.cookie))
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodePageToken parses a token as encode writes it, refusing anything else.
func decodePageToken(s string) (pageToken, error) {
	if len(s) != base64.RawURLEncoding.EncodedLen(pageTokenLen) {
		return pageToken{}, fmt.Errorf("page token of %d characters, want %d: %w", len(s), base64.RawURLEncoding.EncodedLen(pageTokenLen), errBadPageToken)
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != pageTokenLen {
		return pageToken{}, fmt.Errorf("page token is not one this daemon issued: %w", errBadPageToken)
	}
	if b[0] != pageTokenVersion {
		return pageToken{}, fmt.Errorf("page token of version %d, want %d: %w", b[0], pageTokenVersion, errBadPageToken)
	}
	t := pageToken{
		dir: dirIdentity{
			dev:       binary.BigEndian.Uint64(b[1:9]),
			ino:       binary.BigEndian.Uint64(b[9:17]),
			birthSec:  int64(binary.BigEndian.Uint64(b[17:25])),
			birthNsec: binary.BigEndian.Uint32(b[25:29]),
		},
		cookie: int64(binary.BigEndian.Uint64(b[29:37])),
	}
	if t.dir.birthNsec >= 1e9 || t.cookie <= 0 {
		return pageToken{}, fmt.Errorf("page token holds no position a listing can have: %w", errBadPageToken)
	}
	return t, nil
}

// identityOf returns the identity of the open directory fd. The birth time is
// zero on filesystems that do not keep one; device and inode still tell
// directories apart there, though not a replacement reusing the inode.
func identityOf(fd int) (dirIdentity, error) {
	var sx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_BTIME, &sx); err != nil {
		return dirIdentity{}, err
	}
	id := dirIdentity{dev: unix.Mkdev(sx.Dev_major, sx.Dev_minor), ino: sx.Ino}
	if sx.Mask&unix.STATX_BTIME != 0 {
		id.birthSec, id.birthNsec = sx.Btime.Sec, sx.Btime.Nsec
	}
	return id, nil
}

// pageSizeOf is the page size a request asks for, defaulted and capped.
func pageSizeOf(requested uint32) int {
	switch {
	case requested == 0:
		return defaultPageSize
	case requested > maxPageSize:
		return maxPageSize
	}
	return int(requested)
}

// listPage lists up to size entries of dir from where token left off (the
// start when empty) and returns the token of the next page, empty when the
// directory has no more entries.
func listPage(ctx context.Context, dir string, size int, token string, db *accountDB) ([]*filesystemv1.EntryInfo, string, error) {
	var from pageToken
	if token != "" {
		var err error
		if from, err = decodePageToken(token); err != nil {
			return nil, "", fmt.Errorf("list %s: %w", dir, err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("list %s: %w", dir, &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	defer unix.Close(fd)
	id, err := identityOf(fd)
	if err != nil {
		return nil, "", fmt.Errorf("list %s: statx: %w", dir, err)
	}
	if token != "" {
		if from.dir != id {
			return nil, "", fmt.Errorf("list %s: the page token is for another directory, or this one was replaced since; list again without a token: %w", dir, errBadPageToken)
		}
		if _, err := unix.Seek(fd, from.cookie, 0); err != nil {
			return nil, "", fmt.Errorf("list %s: seek to the page token's position: %v: %w", dir, err, errBadPageToken)
		}
	}
	r := direntReader{fd: fd, buf: make([]byte, direntBuffer)}
	var out []*filesystemv1.EntryInfo
	var last int64
	for {
		name, off, err := r.next(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("list %s: %w", dir, err)
		}
		if name == "" {
			return out, "", nil // the end of the directory
		}
		if len(out) == size {
			return out, pageToken{dir: id, cookie: last}.encode(), nil
		}
		last = off
		p := path.Join(dir, name)
		fi, err := os.Lstat(p)
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, entryFromInfo(p, fi, db, false)) // SPACE's paging: its own answers
	}
}

// direntReader yields the entries of a directory fd from its current
// position, with the getdents cookie of the position after each, skipping
// "." and "..".
type direntReader struct {
	fd   int
	buf  []byte
	rest []byte // unparsed records of the last getdents
}

// next returns the next entry's name and cookie; an empty name at the end.
func (r *direntReader) next(ctx context.Context) (string, int64, error) {
	for {
		for len(r.rest) > 0 {
			name, off, rest, err := parseDirent(r.rest)
			if err != nil {
				return "", 0, err
			}
			r.rest = rest
			if name != "." && name != ".." {
				return name, off, nil
			}
		}
		if err := ctx.Err(); err != nil {
			return "", 0, err
		}
		n, err := unix.Getdents(r.fd, r.buf)
		if err != nil {
			return "", 0, fmt.Errorf("getdents: %w", err)
		}
		if n == 0 {
			return "", 0, nil
		}
		r.rest = r.buf[:n]
	}
}

// parseDirent splits the first struct linux_dirent64 off b.
func parseDirent(b []byte) (name string, off int64, rest []byte, err error) {
	const header = 8 + 8 + 2 + 1 // d_ino, d_off, d_reclen, d_type
	if len(b) < header {
		return "", 0, nil, fmt.Errorf("getdents: truncated record")
	}
	off = int64(binary.NativeEndian.Uint64(b[8:16]))
	reclen := int(binary.NativeEndian.Uint16(b[16:18]))
	if reclen < header || reclen > len(b) {
		return "", 0, nil, fmt.Errorf("getdents: record of %d bytes in %d", reclen, len(b))
	}
	nb := b[header:reclen]
	for i, c := range nb {
		if c == 0 {
			nb = nb[:i]
			break
		}
	}
	return string(nb), off, b[reclen:], nil
}

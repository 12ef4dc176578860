package guestd

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
)

// metadataXattrPrefix is where envd keeps user metadata of files.
const metadataXattrPrefix = "user.e2b."

// envdCaller reports whether h is a request the E2B proxy forwarded, to be
// answered as envd answers (filesystemv1.EnvdCompatHeader).
func envdCaller(h interface{ Get(string) string }) bool {
	return h.Get(filesystemv1.EnvdCompatHeader) == filesystemv1.EnvdCompatE2B
}

// entryInfo describes the file at p without following a final symlink.
// envd: a symlink's target as envd reports it (symlinkTarget).
func entryInfo(p string, db *accountDB, envd bool) (*filesystemv1.EntryInfo, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	return entryFromInfo(p, fi, db, envd), nil
}

// entryFromInfo describes the file at p whose Lstat is fi. A symlink's
// target is the link's text (readlink) for SPACE's API; for envd's
// (envd true) the absolute path it resolves to (linkTarget).
func entryFromInfo(p string, fi fs.FileInfo, db *accountDB, envd bool) *filesystemv1.EntryInfo {
	e := &filesystemv1.EntryInfo{
		Name:         path.Base(p),
		Path:         p,
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  permissionString(fi.Mode()),
		ModifiedTime: timestamppb.New(fi.ModTime()),
		Type:         fileType(fi.Mode()),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = db.userName(st.Uid)
		e.Group = db.groupNameOf(st.Gid)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if target, err := linkTarget(p, envd); err == nil {
			e.SymlinkTarget = &target
		}
	}
	e.Metadata = readMetadata(p)
	return e
}

// linkTarget is the target of the symlink at p: the link's text, or with
// envd the absolute path it resolves to, every link on the way followed
// (envd's symlinkTarget). A link that resolves to nothing (dangling, a
// loop) gives the absolute, cleaned form of its text.
func linkTarget(p string, envd bool) (string, error) {
	text, err := os.Readlink(p)
	if err != nil || !envd {
		return text, err
	}
	if resolved, err := filepath.EvalSymlinks(p); err == nil {
		if abs, err := filepath.Abs(resolved); err == nil {
			return abs, nil
		}
	}
	if !path.IsAbs(text) {
		text = path.Join(path.Dir(p), text)
	}
	return path.Clean(text), nil
}

func fileType(m fs.FileMode) filesystemv1.FileType {
	switch {
	case m&fs.ModeSymlink != 0:
		return filesystemv1.FileType_FILE_TYPE_SYMLINK
	case m.IsDir():
		return filesystemv1.FileType_FILE_TYPE_DIRECTORY
	case m.IsRegular():
		return filesystemv1.FileType_FILE_TYPE_FILE
	}
	return filesystemv1.FileType_FILE_TYPE_UNSPECIFIED
}

// permissionString renders m like ls -l: "drwxr-xr-x", "-rwsr-x--T".
func permissionString(m fs.FileMode) string {
	var b [10]byte
	switch {
	case m.IsDir():
		b[0] = 'd'
	case m&fs.ModeSymlink != 0:
		b[0] = 'l'
	case m&fs.ModeNamedPipe != 0:
		b[0] = 'p'
	case m&fs.ModeSocket != 0:
		b[0] = 's'
	case m&fs.ModeCharDevice != 0:
		b[0] = 'c'
	case m&fs.ModeDevice != 0:
		b[0] = 'b'
	default:
		b[0] = '-'
	}
	const rwx = "rwxrwxrwx"
	for i := 0; i < 9; i++ {
		if m&(1<<uint(8-i)) != 0 {
			b[i+1] = rwx[i]
		} else {
			b[i+1] = '-'
		}
	}
	special := func(i int, set bool, lower, upper byte) {
		if !set {
			return
		}
		if b[i] == '-' {
			b[i] = upper
		} else {
			b[i] = lower
		}
	}
	special(3, m&fs.ModeSetuid != 0, 's', 'S')
	special(6, m&fs.ModeSetgid != 0, 's', 'S')
	special(9, m&fs.ModeSticky != 0, 't', 'T')
	return string(b[:])
}

// readMetadata returns the user.e2b.* extended attributes of p (no symlink
// following), bounded to what a well-behaved upload can set.
func readMetadata(p string) map[string]string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n <= 0 {
		return nil
	}
	var out map[string]string
	val := make([]byte, 4096)
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		key, ok := strings.CutPrefix(name, metadataXattrPrefix)
		if !ok || key == "" {
			continue
		}
		m, err := unix.Lgetxattr(p, name, val)
		if err != nil {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[key] = string(val[:m])
	}
	return out
}

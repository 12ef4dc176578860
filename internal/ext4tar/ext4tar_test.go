package ext4tar

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

// mkfs makes an ext4 image of size bytes holding dir with mkfs.ext4 -d,
// as vmimage.RootImage does, with extra options.
func mkfs(t testing.TB, dir string, size int64, opts ...string) string {
	t.Helper()
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 is not installed (apt-get install e2fsprogs)")
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(size)
	f.Close()
	args := append([]string{"-q", "-F", "-m", "0"}, opts...)
	args = append(args, "-d", dir, img)
	if out, err := exec.Command("mkfs.ext4", args...).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	return img
}

// entry is what a test compares of a tree entry.
type entry struct {
	typ      byte
	mode     int64
	uid, gid int
	body     string // a file's content's length and first bytes, a link's target
}

func (e entry) String() string {
	return fmt.Sprintf("type %c mode %o owner %d:%d %q", e.typ, e.mode, e.uid, e.gid, e.body)
}

func describeBody(b []byte) string {
	if len(b) > 16 {
		return fmt.Sprintf("%d bytes %q…%q", len(b), b[:8], b[len(b)-8:])
	}
	return string(b)
}

// readTar lists a tar stream's entries by name.
func readTar(t *testing.T, r io.Reader) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		e := entry{typ: h.Typeflag, mode: h.Mode, uid: h.Uid, gid: h.Gid, body: h.Linkname}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			e.body = describeBody(b)
		}
		out[strings.TrimSuffix(h.Name, "/")] = e
	}
}

// readTree lists dir as readTar lists a stream of it (the first path of a
// hard link is the one Write walks to first: the test has one link, named so).
func readTree(t *testing.T, dir string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	seen := map[uint64]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		name := filepath.ToSlash(rel)
		st := fi.Sys().(*syscall.Stat_t)
		e := entry{mode: int64(fi.Mode().Perm()), uid: int(st.Uid), gid: int(st.Gid)}
		if fi.Mode()&os.ModeSetuid != 0 {
			e.mode |= 0o4000
		}
		if fi.Mode()&os.ModeSticky != 0 {
			e.mode |= 0o1000
		}
		switch {
		case fi.IsDir():
			e.typ = tar.TypeDir
		case fi.Mode()&os.ModeSymlink != 0:
			e.typ = tar.TypeSymlink
			e.body, _ = os.Readlink(p)
		case fi.Mode()&os.ModeNamedPipe != 0:
			e.typ = tar.TypeFifo
		case fi.Mode().IsRegular():
			if first, ok := seen[st.Ino]; ok {
				e.typ, e.body = tar.TypeLink, first
				break
			}
			if st.Nlink > 1 {
				seen[st.Ino] = name
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.typ, e.body = tar.TypeReg, describeBody(b)
		}
		out[name] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sampleTree is a tree with every kind of entry Write reads: files small,
// large and sparse, a setuid file, a file of another owner, a hard link,
// short and long symlinks (in the inode, in a block), a FIFO, a sticky
// directory, a directory large enough to be hashed, deep nesting.
func sampleTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "etc"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "etc", "hello"), []byte("hello from a vm build\n"), 0o644))
	big := bytes.Repeat([]byte("0123456789abcdef"), 300_000) // 4.6 MiB: several extents' worth
	must(os.WriteFile(filepath.Join(dir, "big"), big, 0o600))
	sparse, err := os.Create(filepath.Join(dir, "sparse"))
	must(err)
	sparse.WriteAt([]byte("end"), 3<<20)
	sparse.Close()
	must(os.WriteFile(filepath.Join(dir, "suid"), []byte("#!/bin/sh\n"), 0o4755))
	must(os.WriteFile(filepath.Join(dir, "user-file"), []byte("mine"), 0o640))
	must(os.Chown(filepath.Join(dir, "user-file"), 1000, 1001))
	must(os.Link(filepath.Join(dir, "etc", "hello"), filepath.Join(dir, "hello-link")))
	must(os.Symlink("etc/hello", filepath.Join(dir, "short-link")))
	must(os.Symlink("/"+strings.Repeat("long/", 30)+"target", filepath.Join(dir, "long-link")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	must(os.Mkdir(filepath.Join(dir, "tmp"), 0o777))
	must(os.Chmod(filepath.Join(dir, "tmp"), 0o1777))
	many := filepath.Join(dir, "many")
	must(os.Mkdir(many, 0o755))
	for i := range 600 {
		must(os.WriteFile(filepath.Join(many, fmt.Sprintf("file-with-a-long-name-%04d", i)), []byte{byte(i)}, 0o644))
	}
	must(os.MkdirAll(filepath.Join(dir, "a", "b", "c", "d", "e"), 0o755))
	return dir
}

// TestWriteMatchesTheTree: an image made by mkfs.ext4 -d (as the vm
// runtime's root disks are) reads back as the tree it was made from, on 4
// KiB and 1 KiB blocks, with and without a journal and metadata checksums.
func TestWriteMatchesTheTree(t *testing.T) {
	dir := sampleTree(t)
	want := readTree(t, dir)
	for _, opts := range [][]string{
		nil,
		{"-b", "1024", "-O", "^has_journal,^metadata_csum"},
		{"-O", "^dir_index,^64bit"},
	} {
		t.Run(strings.Join(opts, " "), func(t *testing.T) {
			img := mkfs(t, dir, 64<<20, opts...)
			f, err := os.Open(img)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fi, _ := f.Stat()
			var buf bytes.Buffer
			if err := Write(context.Background(), f, fi.Size(), &buf, DefaultLimits); err != nil {
				t.Fatal(err)
			}
			got := readTar(t, &buf)
			for name, w := range want {
				g, ok := got[name]
				if name == "." {
					// mkfs -d gives the root the source dir's owner
					// and mode; only its type matters here.
					if !ok || g.typ != tar.TypeDir {
						t.Errorf("root: %v, want a directory", g)
					}
					continue
				}
				if !ok {
					t.Errorf("%s: missing, want %v", name, w)
				} else if g != w {
					t.Errorf("%s: %v, want %v", name, g, w)
				}
			}
			for name := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("%s: in the stream, not in the tree", name)
				}
			}
		})
	}
}

// TestWriteRefusesWhatItCannotRead: not ext4, an ext2 image (block maps),
// a truncated image, and a tree deeper or larger than the limits are
// refused with ErrFormat, never read past.
func TestWriteRefusesWhatItCannotRead(t *testing.T) {
	dir := sampleTree(t)
	ext4 := mkfs(t, dir, 64<<20)
	full, err := os.ReadFile(ext4)
	if err != nil {
		t.Fatal(err)
	}
	ext2 := mkfs(t, dir, 64<<20, "-t", "ext2", "-O", "^extents")
	ext2b, _ := os.ReadFile(ext2)
	for _, tc := range []struct {
		name string
		img  []byte
		lim  Limits
		want string
	}{
		{"zeros", make([]byte, 1<<20), DefaultLimits, "no ext2/3/4 superblock magic"},
		{"ext2", ext2b, DefaultLimits, "no extents feature"},
		{"truncated", full[:2<<20], DefaultLimits, "blocks of"},
		{"deep", full, Limits{MaxEntries: 1 << 20, MaxDepth: 3, MaxBytes: 1 << 30}, "nested deeper than 3"},
		{"many", full, Limits{MaxEntries: 100, MaxDepth: 64, MaxBytes: 1 << 30}, "more than 100 entries"},
		{"bytes", full, Limits{MaxEntries: 1 << 20, MaxDepth: 64, MaxBytes: 1 << 20}, "more than 1048576 bytes of files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Write(context.Background(), bytes.NewReader(tc.img), int64(len(tc.img)), io.Discard, tc.lim)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Write = %v, want ErrFormat saying %q", err, tc.want)
			}
		})
	}
}

// TestWriteRefusesNamesWithSlash: a directory entry whose name holds a '/'
// (a crafted image: ext4 never writes one) would name a path elsewhere in
// the tree, "../../etc" one outside it; Write refuses the image.
func TestWriteRefusesNamesWithSlash(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "zzslashzz"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := os.ReadFile(mkfs(t, dir, 8<<20, "-O", "^metadata_csum"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(img, []byte("zzslashzz")) != 1 {
		t.Fatalf("the name is %d times in the image, want once", bytes.Count(img, []byte("zzslashzz")))
	}
	img = bytes.Replace(img, []byte("zzslashzz"), []byte("../../etc"), 1)
	var out bytes.Buffer
	err = Write(context.Background(), bytes.NewReader(img), int64(len(img)), &out, DefaultLimits)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), `name "../../etc"`) {
		t.Errorf("Write = %v, want ErrFormat naming \"../../etc\"; the stream has %v", err, readTar(t, &out))
	}
}

// TestWriteRefusesDirectoryLoops: a directory entry that names an
// ancestor directory (a crafted image: ext4 links no directory twice)
// would make the walk endless; Write refuses it as a loop.
func TestWriteRefusesDirectoryLoops(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub", "loopme"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := os.ReadFile(mkfs(t, dir, 8<<20, "-O", "^metadata_csum"))
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(img, []byte("loopme"))
	if i < 8 || bytes.Count(img, []byte("loopme")) != 1 || img[i-2] != 6 {
		t.Fatalf("the entry of loopme is not found once in the image")
	}
	// The entry's inode becomes the root's (2): sub/loopme is / again.
	binary.LittleEndian.PutUint32(img[i-8:], 2)
	err = Write(context.Background(), bytes.NewReader(img), int64(len(img)), io.Discard, DefaultLimits)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "entered twice (a loop)") {
		t.Errorf("Write = %.300v, want ErrFormat naming the loop", err)
	}
}

// TestShownClipsPaths: a path in an error keeps its last 256 bytes, valid
// UTF-8, so a thousand levels of long names do not make a huge reason.
func TestShownClipsPaths(t *testing.T) {
	long := strings.Repeat("é/"+strings.Repeat("x", 250), 1000)
	if got := shown(long); len(got) > 256+len("…") || !strings.HasSuffix(long, strings.TrimPrefix(got, "…")) || !utf8.ValidString(got) {
		t.Errorf("shown: %d bytes, want the last 256 at most, valid UTF-8", len(got))
	}
	if got := shown("a/b"); got != "a/b" {
		t.Errorf("shown(a/b) = %q", got)
	}
}

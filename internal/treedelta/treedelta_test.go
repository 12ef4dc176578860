package treedelta

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/testenv"
	"golang.org/x/sys/unix"
)

// info is what a round trip must preserve of one path.
type info struct {
	typ      fs.FileMode
	mode     uint32
	uid, gid uint32
	mtime    int64 // nanoseconds; not compared for symlinks
	content  string
	target   string
	link     string // the first path (sorted) sharing the inode, for regular files
}

// scan records every path under dir.
func scan(t *testing.T, dir string) map[string]info {
	t.Helper()
	out := map[string]info{}
	inodes := map[uint64]string{}
	var paths []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		in := info{mode: st.Mode, uid: st.Uid, gid: st.Gid, mtime: st.Mtim.Nano()}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			in.content = string(b)
			if first, ok := inodes[st.Ino]; ok {
				in.link = first
			} else {
				inodes[st.Ino] = rel
			}
		case unix.S_IFLNK:
			in.target, _ = os.Readlink(p)
			in.mtime = 0
		}
		out[rel] = in
	}
	return out
}

func compareTrees(t *testing.T, want, got map[string]info) {
	t.Helper()
	for p, w := range want {
		g, ok := got[p]
		if !ok {
			t.Errorf("%s: missing after apply", p)
			continue
		}
		if w != g {
			t.Errorf("%s: after apply\n got  %+v\n want %+v", p, short(g), short(w))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: present after apply, absent in the tree", p)
		}
	}
}

func short(i info) info {
	if len(i.content) > 40 {
		i.content = i.content[:40] + "..."
	}
	return i
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

func write(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

var past = time.Date(2024, 1, 2, 3, 4, 5, 123456789, time.UTC)

// makeBase builds a template-like tree.
func makeBase(t *testing.T, dir string) {
	t.Helper()
	write(t, filepath.Join(dir, "etc/passwd"), "root:x:0:0\n", 0o644)
	write(t, filepath.Join(dir, "etc/hostname"), "base\n", 0o644)
	write(t, filepath.Join(dir, "bin/tool"), strings.Repeat("elf", 50000), 0o755)
	write(t, filepath.Join(dir, "home/user/notes.txt"), "hello", 0o600)
	write(t, filepath.Join(dir, "home/user/keep.txt"), "same", 0o640)
	write(t, filepath.Join(dir, "var/cache/a/b/c"), "deep", 0o644)
	write(t, filepath.Join(dir, "var/lib/f"), "file becomes dir", 0o644)
	write(t, filepath.Join(dir, "var/lib/d/x"), "dir becomes file", 0o644)
	write(t, filepath.Join(dir, "usr/bin/perl"), "perl", 0o755)
	write(t, filepath.Join(dir, "linked/one"), "shared inode", 0o644)
	run(t, "ln", filepath.Join(dir, "usr/bin/perl"), filepath.Join(dir, "usr/bin/perl5"))
	run(t, "ln", filepath.Join(dir, "linked/one"), filepath.Join(dir, "linked/two"))
	os.Symlink("../etc/passwd", filepath.Join(dir, "home/pw"))
	os.Symlink("/nonexistent", filepath.Join(dir, "home/dangling"))
	unix.Mkfifo(filepath.Join(dir, "home/fifo"), 0o600)
	os.Chown(filepath.Join(dir, "home/user"), 1000, 1000)
	os.Lchown(filepath.Join(dir, "home/user/notes.txt"), 1000, 1000)
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		ts := []unix.Timespec{unix.NsecToTimespec(past.UnixNano()), unix.NsecToTimespec(past.UnixNano())}
		unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
		return nil
	})
}

// mutate changes tree in every way the format covers.
func mutate(t *testing.T, tree string) {
	t.Helper()
	j := func(p string) string { return filepath.Join(tree, p) }
	// Same size, old mtime put back: only ctime shows the change.
	write(t, j("etc/hostname"), "HACK\n", 0o644)
	ts := []unix.Timespec{unix.NsecToTimespec(past.UnixNano()), unix.NsecToTimespec(past.UnixNano())}
	unix.UtimesNanoAt(unix.AT_FDCWD, j("etc/hostname"), ts, 0)
	f, _ := os.OpenFile(j("home/user/notes.txt"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(" world")
	f.Close()
	os.Chmod(j("bin/tool"), 0o700)
	os.Lchown(j("home/user/keep.txt"), 1001, 1002)
	write(t, j("new/dir/file"), "new file", 0o644)
	write(t, j("new/empty"), "", 0o600)
	os.Remove(j("etc/passwd"))
	os.RemoveAll(j("var/cache/a"))
	os.Remove(j("var/lib/f"))
	write(t, j("var/lib/f/inside"), "now a dir", 0o644)
	os.RemoveAll(j("var/lib/d"))
	write(t, j("var/lib/d"), "now a file", 0o644)
	os.Remove(j("home/pw"))
	os.Symlink("user/notes.txt", j("home/pw"))
	os.Symlink("new/dir", j("dirlink"))
	unix.Mkfifo(j("new/fifo2"), 0o640)
	run(t, "ln", j("new/dir/file"), j("new/hardlink"))
	// In place: both names of the inode see the change.
	f, _ = os.OpenFile(j("linked/one"), os.O_WRONLY, 0)
	f.WriteString("SHARED")
	f.Close()
	// A sparse file.
	f, _ = os.Create(j("new/sparse"))
	f.Truncate(10 << 20)
	f.WriteAt([]byte("end"), 10<<20-3)
	f.Close()
	write(t, j("new/suid"), "suid", 0o4755)
	os.Chmod(j("home"), 0o751)
	os.Chmod(tree, 0o711)
}

// cpTree copies src to dst preserving everything (a stand-in for a snapshot
// where btrfs is not used).
func cpTree(t *testing.T, src, dst string) {
	t.Helper()
	run(t, "cp", "-a", src, dst)
}

func diffBytes(t *testing.T, base, tree string) (Stats, []byte) {
	t.Helper()
	var buf bytes.Buffer
	st, err := Diff(context.Background(), base, tree, &buf)
	if err != nil {
		t.Fatalf("Diff: %v", err)
	}
	return st, buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	base, tree, target := filepath.Join(dir, "base"), filepath.Join(dir, "tree"), filepath.Join(dir, "target")
	makeBase(t, base)
	cpTree(t, base, tree)
	mutate(t, tree)
	cpTree(t, base, target)
	// Device nodes and sockets are skipped; one replaces a base file.
	unix.Mknod(filepath.Join(tree, "home/user/keep.txt2"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))
	os.Remove(filepath.Join(tree, "usr/bin/perl5"))
	unix.Mknod(filepath.Join(tree, "usr/bin/perl5"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))

	st, stream := diffBytes(t, base, tree)
	if st.SkippedDevices != 2 {
		t.Errorf("SkippedDevices = %d, want 2", st.SkippedDevices)
	}
	ast, err := Apply(context.Background(), target, bytes.NewReader(stream), Limits{AllowSetID: true})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if ast.Entries != st.Entries || ast.Whiteouts != st.Whiteouts || ast.HardLinks != st.HardLinks {
		t.Errorf("Apply stats %+v, Diff stats %+v", ast, st)
	}
	// The tree without what the format skips.
	want := scan(t, tree)
	delete(want, "home/user/keep.txt2")
	delete(want, "usr/bin/perl5")
	compareTrees(t, want, scan(t, target))

	// Sparse content is written sparse.
	var sst unix.Stat_t
	unix.Stat(filepath.Join(target, "new/sparse"), &sst)
	if sst.Blocks*512 > 1<<20 {
		t.Errorf("new/sparse uses %d bytes on disk, want it sparse", sst.Blocks*512)
	}
	// A second diff of the result against the tree finds only the skipped
	// devices (whited out).
	again, _ := diffBytes(t, tree, target)
	if again.Entries != 2 || again.Whiteouts != 2 {
		t.Errorf("diff of the applied tree against the tree: %+v, want just 2 whiteouts", again)
	}
	t.Logf("diff: %+v", st)
}

func TestUnchangedTreeIsEmpty(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	base, tree := filepath.Join(dir, "base"), filepath.Join(dir, "tree")
	makeBase(t, base)
	cpTree(t, base, tree)
	st, _ := diffBytes(t, base, tree)
	if st.Entries != 0 {
		t.Errorf("unchanged copy: %d entries, want 0 (%+v)", st.Entries, st)
	}
	if st.Compared == 0 {
		t.Error("a plain copy has other ctimes: want contents compared")
	}
}

func TestSetIDMaskedAndIDsMapped(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	base, tree, target := filepath.Join(dir, "base"), filepath.Join(dir, "tree"), filepath.Join(dir, "target")
	makeBase(t, base)
	cpTree(t, base, tree)
	write(t, filepath.Join(tree, "suid"), "x", 0o6755)
	os.Chown(filepath.Join(tree, "suid"), 1000, 1000)
	cpTree(t, base, target)
	_, stream := diffBytes(t, base, tree)
	lim := Limits{IDs: []IDRange{{Stream: 0, Host: 100000, Size: 65536}}}
	if _, err := Apply(context.Background(), target, bytes.NewReader(stream), lim); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	unix.Lstat(filepath.Join(target, "suid"), &st)
	if st.Mode&0o7777 != 0o755 || st.Uid != 101000 || st.Gid != 101000 {
		t.Errorf("suid: mode %#o owner %d:%d, want 0755 101000:101000", st.Mode&0o7777, st.Uid, st.Gid)
	}
	lim.IDs = []IDRange{{Stream: 0, Host: 100000, Size: 1000}}
	target2 := filepath.Join(dir, "target2")
	cpTree(t, base, target2)
	if _, err := Apply(context.Background(), target2, bytes.NewReader(stream), lim); err == nil || !strings.Contains(err.Error(), "outside the allowed id ranges") {
		t.Errorf("uid 1000 outside [0,1000): got %v", err)
	}
}

// TestBtrfsSnapshot diffs a btrfs snapshot: unchanged files keep their ctime
// and are never read.
func TestBtrfsSnapshot(t *testing.T) {
	mnt := btrfsDir(t)
	base, tree, target := filepath.Join(mnt, "base"), filepath.Join(mnt, "tree"), filepath.Join(mnt, "target")
	run(t, "btrfs", "subvolume", "create", base)
	makeBase(t, base)
	run(t, "btrfs", "subvolume", "snapshot", base, tree)
	run(t, "btrfs", "subvolume", "snapshot", base, target)
	write(t, filepath.Join(tree, "home/user/keep.txt"), "SAME", 0o640) // same size
	unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(tree, "home/user/keep.txt"), []unix.Timespec{unix.NsecToTimespec(past.UnixNano()), unix.NsecToTimespec(past.UnixNano())}, 0)
	st, stream := diffBytes(t, base, tree)
	if st.Compared != 1 || st.Files != 1 {
		t.Errorf("snapshot diff: compared %d files and wrote %d, want 1 and 1 (%+v)", st.Compared, st.Files, st)
	}
	if _, err := Apply(context.Background(), target, bytes.NewReader(stream), Limits{}); err != nil {
		t.Fatal(err)
	}
	compareTrees(t, scan(t, tree), scan(t, target))
	for _, p := range []string{target, tree, base} {
		run(t, "btrfs", "subvolume", "delete", p)
	}
}

func TestDiffOfMissingDir(t *testing.T) {
	dir := t.TempDir()
	if _, err := Diff(context.Background(), filepath.Join(dir, "nope"), dir, &bytes.Buffer{}); err == nil {
		t.Error("Diff of a missing base: want an error")
	}
	os.Symlink(dir, filepath.Join(dir, "link"))
	if _, err := Diff(context.Background(), dir, filepath.Join(dir, "link"), &bytes.Buffer{}); err == nil {
		t.Error("Diff of a tree given as a symlink: want an error")
	}
}

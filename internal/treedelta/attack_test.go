package treedelta

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/testenv"
)

// entry is one hand-made stream entry.
type entry struct {
	hdr     tar.Header
	content string
}

func reg(name, content string) entry {
	return entry{tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content))}, content}
}

func symlink(name, target string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

func hardlink(name, target string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644}}
}

func dirEntry(name string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
}

func whiteout(name string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, PAXRecords: map[string]string{paxWhiteout: "1"}}}
}

// stream builds a well-formed stream (version header, entries, end marker).
func stream(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{paxVersion: version}, Format: tar.FormatPAX}))
	for _, e := range entries {
		h := e.hdr
		h.Format = tar.FormatPAX
		if h.Size > int64(len(e.content)) {
			// A header that promises more than follows: the stream ends
			// with it, as an attacker's would.
			must(tw.Flush())
			raw := tar.NewWriter(&buf)
			must(raw.WriteHeader(&h))
			return buf.Bytes()
		}
		must(tw.WriteHeader(&h))
		if e.content != "" {
			_, err := tw.Write([]byte(e.content))
			must(err)
		}
	}
	must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{paxEnd: strconv.Itoa(len(entries))}, Format: tar.FormatPAX}))
	must(tw.Close())
	return buf.Bytes()
}

// attackBase is the directory attackDirs builds in: one per top-level
// test, known before the entries are built.
func attackBase(t *testing.T) string {
	t.Helper()
	name := strings.SplitN(t.Name(), "/", 2)[0]
	if b, ok := attackBases[name]; ok {
		return b
	}
	b := t.TempDir()
	attackBases[name] = b
	return b
}

var attackBases = map[string]string{}

// attackDirs returns a target tree and an "outside" directory with a
// sentinel file, and a function that fails the test if outside changed.
func attackDirs(t *testing.T) (target, outside string, check func()) {
	t.Helper()
	dir := attackBase(t)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	target, outside = filepath.Join(dir, "target"), filepath.Join(dir, "outside")
	write(t, filepath.Join(outside, "secret"), "secret", 0o600)
	write(t, filepath.Join(target, "sub/file"), "in base", 0o644)
	os.Symlink(outside, filepath.Join(target, "baselink"))           // absolute, planted in the base
	os.Symlink("sub", filepath.Join(target, "innerlink"))            // relative, inside
	os.Symlink("../outside", filepath.Join(target, "relout"))        // relative, escaping
	os.Symlink("/proc/self/root", filepath.Join(target, "procroot")) // a magic link's path, planted
	os.Symlink("/proc/self/cwd", filepath.Join(target, "proccwd"))
	return target, outside, func() {
		t.Helper()
		ents, _ := os.ReadDir(outside)
		b, err := os.ReadFile(filepath.Join(outside, "secret"))
		if len(ents) != 1 || err != nil || string(b) != "secret" {
			t.Fatalf("the directory outside the tree changed: %d entries, secret %q (%v)", len(ents), b, err)
		}
	}
}

func TestApplyAttacks(t *testing.T) {
	testenv.RequiresRoot(t)
	// The entries through /proc/self/root name the outside directory by its
	// absolute path, which attackDirs fixes under this one.
	outsideRel := filepath.Join(attackBase(t), "outside")
	tests := []struct {
		name    string
		entries []entry
		lim     Limits
		class   error // the error class expected, nil for any error
	}{
		// Links point at the test's own outside directory, never at the
		// host's /etc: with a defence removed (as its removal check does)
		// the write lands there, where check sees it, not in /etc/passwd.
		{name: "symlink to outside then a file through it", entries: []entry{symlink("a", outsideRel), reg("a/passwd", "pwned")}},
		{name: "file through a base symlink to outside", entries: []entry{reg("baselink/x", "pwned")}},
		{name: "file through a relative escaping symlink", entries: []entry{reg("relout/x", "pwned")}},
		{name: "file through a symlink inside the tree", entries: []entry{reg("innerlink/x", "no")}},
		{name: "dir through a symlink", entries: []entry{dirEntry("baselink/d")}},
		{name: "whiteout through a symlink", entries: []entry{whiteout("baselink/secret")}},
		{name: "dotdot name", entries: []entry{reg("../outside/x", "pwned")}, class: errdefs.ErrInvalidArgument},
		{name: "inner dotdot name", entries: []entry{reg("sub/../../outside/x", "pwned")}, class: errdefs.ErrInvalidArgument},
		{name: "absolute name", entries: []entry{reg("/tmp/x", "pwned")}, class: errdefs.ErrInvalidArgument},
		{name: "whiteout of dotdot", entries: []entry{whiteout("..")}, class: errdefs.ErrInvalidArgument},
		{name: "whiteout of the root", entries: []entry{whiteout(".")}, class: errdefs.ErrInvalidArgument},
		{name: "empty name", entries: []entry{reg("", "x")}, class: errdefs.ErrInvalidArgument},
		{name: "double slash", entries: []entry{reg("sub//x", "x")}, class: errdefs.ErrInvalidArgument},
		{name: "hard link to outside by dotdot", entries: []entry{hardlink("h", "../outside/secret")}, class: errdefs.ErrInvalidArgument},
		{name: "hard link to an absolute path", entries: []entry{hardlink("h", "/etc/passwd")}, class: errdefs.ErrInvalidArgument},
		{name: "hard link through a symlink", entries: []entry{hardlink("h", "baselink/secret")}},
		{name: "hard link to a symlink", entries: []entry{hardlink("h", "baselink")}, class: errdefs.ErrInvalidArgument},
		{name: "hard link to a directory", entries: []entry{hardlink("h", "sub")}, class: errdefs.ErrInvalidArgument},
		{name: "device node", entries: []entry{{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}}}, class: errdefs.ErrPermissionDenied},
		{name: "huge file", entries: []entry{{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "big", Size: 1 << 40}}}, lim: Limits{MaxBytes: 1 << 20}, class: errdefs.ErrResourceExhausted},
		{name: "total bytes", entries: []entry{reg("a", "12345"), reg("b", "12345")}, lim: Limits{MaxBytes: 8}, class: errdefs.ErrResourceExhausted},
		{name: "entry count", entries: []entry{reg("a", "1"), reg("b", "2"), reg("c", "3")}, lim: Limits{MaxEntries: 2}, class: errdefs.ErrResourceExhausted},
		{name: "deep nesting", entries: []entry{reg(strings.Repeat("d/", 40)+"f", "x")}, lim: Limits{MaxDepth: 32}, class: errdefs.ErrInvalidArgument},
		{name: "long path", entries: []entry{reg(strings.Repeat("x", 5000), "x")}, class: errdefs.ErrInvalidArgument},
		{name: "parent missing", entries: []entry{reg("no/such/dir/f", "x")}},
		{name: "uid outside the range", entries: []entry{{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "f", Uid: 70000}}}, class: errdefs.ErrPermissionDenied},
		{name: "negative gid", entries: []entry{{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "f", Gid: -1}}}},
		{name: "self hard link", entries: []entry{hardlink("sub/file", "sub/file")}, class: errdefs.ErrInvalidArgument},
		// B-4: /proc magic links, as symlink targets in the stream and in the base.
		{name: "symlink to /proc/self/root then a file through it", entries: []entry{symlink("p", "/proc/self/root"), reg("p"+filepath.Join(outsideRel, "x"), "pwned")}},
		{name: "file through a base link to /proc/self/root", entries: []entry{reg("procroot"+filepath.Join(outsideRel, "x"), "pwned")}},
		{name: "dir through a base link to /proc/self/cwd", entries: []entry{dirEntry("proccwd/d")}},
		{name: "whiteout through a base link to /proc/self/root", entries: []entry{whiteout("procroot" + filepath.Join(outsideRel, "secret"))}},
		{name: "hard link through /proc/self/root", entries: []entry{hardlink("h", "procroot"+filepath.Join(outsideRel, "secret"))}},
		{name: "symlink to /proc/self/fd then a file through it", entries: []entry{symlink("fd", "/proc/self/fd"), reg("fd/3", "pwned")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target, _, check := attackDirs(t)
			_, err := Apply(context.Background(), target, bytes.NewReader(stream(t, tt.entries...)), tt.lim)
			if err == nil {
				t.Fatal("Apply accepted the stream")
			}
			if tt.class != nil && !errors.Is(err, tt.class) {
				t.Errorf("got %v, want class %v", err, tt.class)
			}
			check()
			if _, err := os.Stat("/etc/passwd"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestApplyReplacesSymlinksWithoutFollowing checks that an entry over a
// symlink replaces the link itself.
func TestApplyReplacesSymlinksWithoutFollowing(t *testing.T) {
	testenv.RequiresRoot(t)
	target, outside, check := attackDirs(t)
	s := stream(t, dirEntry("baselink"), reg("relout", "now a file"), whiteout("innerlink"), symlink("x", outside), dirEntry("x"), reg("x/f", "inside"))
	if _, err := Apply(context.Background(), target, bytes.NewReader(s), Limits{}); err != nil {
		t.Fatal(err)
	}
	check()
	for p, isDir := range map[string]bool{"baselink": true, "relout": false, "x": true} {
		fi, err := os.Lstat(filepath.Join(target, p))
		if err != nil || fi.IsDir() != isDir || fi.Mode()&os.ModeSymlink != 0 {
			t.Errorf("%s: %v %v, want a real %s", p, fi.Mode(), err, map[bool]string{true: "directory", false: "file"}[isDir])
		}
	}
	if _, err := os.Lstat(filepath.Join(target, "innerlink")); !os.IsNotExist(err) {
		t.Errorf("innerlink: %v, want removed", err)
	}
	if _, err := os.Stat(filepath.Join(target, "sub/file")); err != nil {
		t.Errorf("the whiteout of a symlink removed its target: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "f")); !os.IsNotExist(err) {
		t.Error("a file was written outside")
	}
}

func TestApplyRefusesMalformedStreams(t *testing.T) {
	good := stream(t, reg("f", "x"))
	var noVersion bytes.Buffer
	tw := tar.NewWriter(&noVersion)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "f"})
	tw.Close()
	badEnd := bytes.Replace(stream(t, reg("f", "x")), []byte(paxEnd+"=1"), []byte(paxEnd+"=7"), 1)
	tests := map[string][]byte{
		"empty":           nil,
		"no version":      noVersion.Bytes(),
		"truncated":       good[:len(good)/2],
		"no end marker":   good[:1536], // version header and the entry, no end
		"wrong end count": badEnd,
		"garbage":         []byte(strings.Repeat("garbage", 200)),
	}
	for name, s := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Apply(context.Background(), dir, bytes.NewReader(s), Limits{}); !errdefs.IsInvalidArgument(err) {
				t.Errorf("got %v, want invalid argument", err)
			}
		})
	}
	if _, err := Apply(context.Background(), t.TempDir(), bytes.NewReader(good), Limits{}); err != nil {
		t.Errorf("the good stream: %v", err)
	}
}

func fifoHeader(name string) tar.Header {
	return tar.Header{Typeflag: tar.TypeFifo, Name: name, Mode: 0o600}
}

package filestore_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
	"github.com/spacesandbox/space/internal/objstore/filestore"
	"github.com/spacesandbox/space/internal/objstore/objstoretest"
)

func openStore(t *testing.T, dir string) *filestore.Store {
	t.Helper()
	s, err := filestore.Open(t.Context(), dir)
	if err != nil {
		t.Fatalf("Open %s: %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		return openStore(t, filepath.Join(t.TempDir(), "objects"))
	})
}

func TestConformanceThroughOpenURL(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		s, err := objstore.Open(t.Context(), "file://"+filepath.Join(t.TempDir(), "objects"))
		if err != nil {
			t.Fatalf("objstore.Open: %v", err)
		}
		return s
	})
}

func TestOpenURL(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		url   string
		class error
	}{
		{"file://" + dir + "/ok", nil},
		{"file://localhost" + dir + "/ok2", nil},
		{"file:relative/path", errdefs.ErrInvalidArgument},
		{"file://host" + dir, errdefs.ErrInvalidArgument},
		{"file://" + dir + "/x?q=1", errdefs.ErrInvalidArgument},
		{"file://" + dir + "/../x", errdefs.ErrInvalidArgument},
	} {
		s, err := objstore.Open(t.Context(), tc.url)
		if tc.class == nil {
			if err != nil {
				t.Errorf("Open %q: %v", tc.url, err)
				continue
			}
			s.Close()
			continue
		}
		if !errors.Is(err, tc.class) {
			t.Errorf("Open %q: err = %v, want %v", tc.url, err, tc.class)
		}
	}
}

func TestPermissions(t *testing.T) {
	old := unix.Umask(0)
	defer unix.Umask(old)
	dir := filepath.Join(t.TempDir(), "objects")
	s := openStore(t, dir)
	if _, err := s.Put(t.Context(), "a/b/c", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]os.FileMode{
		".": 0o700, ".tmp": 0o700, "a": 0o700, "a/b": 0o700, "a/b/c@": 0o600,
	} {
		fi, err := os.Lstat(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %#o, want %#o", rel, got, want)
		}
	}
}

// TestSymlinksNotFollowed plants links where objects and directories belong:
// the store must neither read nor write through them.
func TestSymlinksNotFollowed(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "objects")
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret@"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dir)
	ctx := t.Context()
	must(t, os.Symlink(filepath.Join(outside, "secret@"), filepath.Join(dir, "leak@")))
	must(t, os.Symlink(outside, filepath.Join(dir, "linkdir")))
	must(t, os.Mkdir(filepath.Join(dir, "inside"), 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "inside", "real@"), []byte("real"), 0o600))
	must(t, os.Symlink("inside", filepath.Join(dir, "relink"))) // stays in the tree, still refused

	for _, key := range []string{"leak", "linkdir/secret", "relink/real"} {
		if _, _, err := s.Get(ctx, key); err == nil || !(errdefs.IsFailedPrecondition(err) || errdefs.IsNotFound(err)) {
			t.Errorf("Get %s through a link: err = %v, want refusal", key, err)
		}
	}
	if _, err := s.Put(ctx, "linkdir/new", strings.NewReader("x"), 1); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Put through a linked directory: err = %v, want FailedPrecondition", err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "new@")); !os.IsNotExist(err) {
		t.Errorf("Put wrote outside the store through a link")
	}
	if err := s.Delete(ctx, "linkdir/secret"); err != nil && !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Delete through a link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "secret@")); err != nil {
		t.Errorf("Delete through a link removed a file outside the store: %v", err)
	}
	infos, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Key != "inside/real" {
		t.Errorf("List = %v, want only inside/real", infos)
	}
	// Overwriting an object that is a link replaces the link, not its target.
	if _, err := s.Put(ctx, "leak", strings.NewReader("mine"), 4); err != nil {
		t.Fatalf("Put over a link: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret@")); string(b) != "secret" {
		t.Errorf("Put over a link changed its target to %q", b)
	}
}

func TestFIFONotOpened(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "objects")
	s := openStore(t, dir)
	must(t, unix.Mkfifo(filepath.Join(dir, "pipe@"), 0o600))
	if _, err := s.Stat(t.Context(), "pipe"); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Stat of a FIFO: err = %v, want FailedPrecondition", err)
	}
}

func TestDigestRecorded(t *testing.T) {
	s := openStore(t, filepath.Join(t.TempDir(), "objects"))
	info, err := s.Put(t.Context(), "x", strings.NewReader("abc"), -1)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Stat(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if st.Digest == "" {
		t.Skip("the test directory's filesystem has no user extended attributes")
	}
	if st.Digest != info.Digest {
		t.Errorf("Stat digest %s, Put digest %s", st.Digest, info.Digest)
	}
}

func TestCollectTemp(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "objects")
	s := openStore(t, dir)
	tmp := filepath.Join(dir, ".tmp")
	old := time.Now().Add(-time.Hour)
	write := func(name string, mtime time.Time) string {
		p := filepath.Join(tmp, name)
		must(t, os.WriteFile(p, []byte("partial"), 0o600))
		must(t, os.Chtimes(p, mtime, mtime))
		return p
	}
	dead := write("dead", old)
	fresh := write("fresh", time.Now())
	held := write("held", old)
	f, err := os.Open(held)
	must(t, err)
	defer f.Close()
	must(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	must(t, os.Symlink("/etc/passwd", filepath.Join(tmp, "link")))

	n, err := s.CollectTemp(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("CollectTemp removed %d entries, want 2 (the dead file and the link)", n)
	}
	for p, want := range map[string]bool{dead: false, fresh: true, held: true} {
		_, err := os.Lstat(p)
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", filepath.Base(p), got, want)
		}
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("CollectTemp followed a link: %v", err)
	}
	// Open collects too.
	f.Close()
	s2 := openStore(t, dir)
	_ = s2
	if _, err := os.Lstat(held); !os.IsNotExist(err) {
		t.Errorf("Open left an unlocked old temporary file: %v", err)
	}
}

// TestCrashedPutInvisible simulates a process dying in the middle of a Put:
// the temporary file stays behind, no object appears, and the next Open
// collects it once it is old.
func TestCrashedPutInvisible(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "objects")
	s := openStore(t, dir)
	p := filepath.Join(dir, ".tmp", "0123456789abcdef")
	must(t, os.WriteFile(p, []byte("half an object"), 0o600))
	infos, err := s.List(t.Context(), "")
	if err != nil || len(infos) != 0 {
		t.Fatalf("List with a dead temporary file = %v, %v; want nothing", infos, err)
	}
	old := time.Now().Add(-2 * time.Minute)
	must(t, os.Chtimes(p, old, old))
	openStore(t, dir)
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("Open kept the dead temporary file: %v", err)
	}
}

func TestRemovedStoreUnavailable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "objects")
	s := openStore(t, dir)
	if _, err := s.Put(t.Context(), "a/b", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	must(t, os.RemoveAll(dir))
	_, err := s.Put(t.Context(), "a/b", strings.NewReader("x"), 1)
	if !errdefs.IsUnavailable(err) {
		t.Errorf("Put into a removed store: err = %v, want Unavailable", err)
	}
	_, _, err = s.Get(t.Context(), "a/b")
	if !errdefs.IsUnavailable(err) {
		t.Errorf("Get from a removed store: err = %v, want Unavailable", err)
	}
}

func TestPutLeavesNoTemp(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "objects")
	s := openStore(t, dir)
	if _, err := s.Put(t.Context(), "x", strings.NewReader("ok"), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "y", io.MultiReader(strings.NewReader("a"), errReader{}), -1); err == nil {
		t.Fatal("Put from a failing reader succeeded")
	}
	entries, err := os.ReadDir(filepath.Join(dir, ".tmp"))
	if err != nil || len(entries) != 0 {
		t.Errorf(".tmp after Puts = %v, %v; want empty", entries, err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkPut reports MB/s of a streamed 64 MiB Put (fsync included) and
// of reading it back.
func BenchmarkPut(b *testing.B) {
	s, err := filestore.Open(b.Context(), filepath.Join(b.TempDir(), "objects"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const size = 64 << 20
	b.Run("Put64MiB", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if _, err := s.Put(b.Context(), "bench/x", objstoretest.Generator(1, size), size); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Get64MiB", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			rc, _, err := s.Get(b.Context(), "bench/x")
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil || n != size {
				b.Fatalf("read %d bytes, %v", n, err)
			}
		}
	})
}

package seal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestOpenKeyFileCreatesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seal.key")
	a, err := OpenKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, %v; want a regular file, 0600", st.Mode(), err)
	}
	b, err := OpenKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != KeyLen || !bytes.Equal(a, b) {
		t.Fatalf("second OpenKeyFile read another key (%x, then %x): the file was made twice", a, b)
	}
	if err := CreateKeyFile(path); !errdefs.IsConflict(err) {
		t.Errorf("CreateKeyFile over an existing file: err = %v, want ErrConflict", err)
	}
	if c, _ := ReadKeyFile(path); !bytes.Equal(c, a) {
		t.Error("CreateKeyFile over an existing file changed it")
	}
}

// TestReadKeyFileRefuses: a key file whose mode lets others in, a link, a
// directory, a fifo and malformed contents are refused with a message
// saying what is wrong.
func TestReadKeyFileRefuses(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.key")
	if err := CreateKeyFile(good); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(good)
	mk := func(name string, perm os.FileMode, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, perm); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	link := filepath.Join(dir, "link.key")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.key")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"world-readable", mk("world.key", 0o644, data), "mode 0644 lets others read it; run chmod 600"},
		{"group-readable", mk("group.key", 0o640, data), "mode 0640 lets others read it"},
		{"group-writable", mk("gw.key", 0o620, data), "mode 0620"},
		{"symbolic link", link, "symbolic link"},
		{"directory", dir, "not a regular file"},
		{"fifo", fifo, "not a regular file"},
		{"short", mk("short.key", 0o600, data[:40]), "want 64 hex digits"},
		{"not hex", mk("nothex.key", 0o600, bytes.Repeat([]byte("zz"), KeyLen)), "not hex"},
		{"too long", mk("long.key", 0o600, bytes.Repeat(data, 2)), "larger than"},
	} {
		for _, read := range []func(string) ([]byte, error){ReadKeyFile, OpenKeyFile} {
			key, err := read(tc.path)
			if key != nil || !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: key %x, err %v; want ErrFailedPrecondition saying %q", tc.name, key, err, tc.want)
			}
		}
	}
	if _, err := ReadKeyFile(filepath.Join(dir, "missing.key")); !errors.Is(err, os.ErrNotExist) || !errdefs.IsFailedPrecondition(err) {
		t.Errorf("missing key file: err = %v, want os.ErrNotExist and ErrFailedPrecondition", err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Error("OpenKeyFile replaced a symbolic link")
	}
}

func TestPrivateFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	if got, err := ReadPrivateFile(path, 10); got != nil || err != nil {
		t.Fatalf("missing file = %q, %v; want nil, nil", got, err)
	}
	if err := WritePrivateFile(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := WritePrivateFile(path, []byte("two")); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPrivateFile(path, 10)
	if err != nil || string(got) != "two" {
		t.Fatalf("ReadPrivateFile = %q, %v; want two", got, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("written mode %v, want 0600", st.Mode().Perm())
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("%d entries in the directory, want 1 (no temporary file left)", len(entries))
	}
}

package vmimage

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCPIOHeaderBytes(t *testing.T) {
	var buf bytes.Buffer
	c := NewCPIO(&buf)
	if err := c.AddFile("ab", 0o644, 5, strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	// header (110) + "ab\0" (3) = 113, padded to 116; data 5 padded to 8.
	want := "070701" + "00000001" + "000081a4" + "00000000" + "00000000" + "00000001" + "00000000" +
		"00000005" + "00000000" + "00000000" + "00000000" + "00000000" + "00000003" + "00000000" + "ab\x00\x00\x00\x00" + "hello\x00\x00\x00"
	if got := string(b[:len(want)]); got != want {
		t.Fatalf("first entry:\n got %q\nwant %q", got, want)
	}
	trailer := b[len(want):]
	if !bytes.HasPrefix(trailer, []byte("070701")) || !bytes.Contains(trailer, []byte("TRAILER!!!\x00")) {
		t.Fatalf("trailer = %q", trailer)
	}
	if len(b)%4 != 0 {
		t.Errorf("archive length %d is not a multiple of 4", len(b))
	}
}

func TestCPIORejects(t *testing.T) {
	for _, name := range []string{"", "/abs", "a/../b", "..", "../x", "a//b", "TRAILER!!!", "x\x00y", "."} {
		c := NewCPIO(&bytes.Buffer{})
		if err := c.AddDir(name, 0o755); err == nil {
			t.Errorf("AddDir(%q) = nil, want an error", name)
		}
	}
	c := NewCPIO(&bytes.Buffer{})
	if err := c.AddFile("short", 0o644, 10, strings.NewReader("abc")); err == nil {
		t.Error("AddFile with fewer bytes than size = nil, want an error")
	}
	if err := c.AddDir("after-error", 0o755); err == nil {
		t.Error("the writer kept going after an error")
	}
	c = NewCPIO(&bytes.Buffer{})
	c.Close()
	if err := c.AddDir("late", 0o755); err == nil {
		t.Error("AddDir after Close = nil, want an error")
	}
}

// TestCPIOReadByTool checks the archive with GNU cpio, an independent reader:
// every entry comes back with its type, mode and content.
func TestCPIOReadByTool(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("skipping: needs the cpio tool (apt-get install cpio)")
	}
	dir := t.TempDir()
	archive := filepath.Join(dir, "a.cpio")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	c := NewCPIO(f)
	big := bytes.Repeat([]byte("0123456789"), 100_003)
	steps := []error{
		c.AddDir("d", 0o750),
		c.AddDir("d/e", 0o755),
		c.AddFile("d/e/f.txt", 0o640, 3, strings.NewReader("xyz")),
		c.AddFile("big", 0o600, int64(len(big)), bytes.NewReader(big)),
		c.AddFile("empty", 0o644, 0, strings.NewReader("")),
		c.AddSymlink("link", "d/e/f.txt"),
		c.Close(),
		f.Close(),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	cmd := exec.Command("cpio", "-i", "-d", "--quiet", "--no-absolute-filenames", "-F", archive)
	cmd.Dir = out
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v: %s", err, b)
	}
	checkFile(t, filepath.Join(out, "d/e/f.txt"), "xyz", 0o640)
	checkFile(t, filepath.Join(out, "big"), string(big), 0o600)
	checkFile(t, filepath.Join(out, "empty"), "", 0o644)
	if fi, err := os.Stat(filepath.Join(out, "d")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Errorf("d: %v, %v; want a directory with mode 0750", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(out, "link")); err != nil || target != "d/e/f.txt" {
		t.Errorf("link -> %q, %v; want d/e/f.txt", target, err)
	}
}

func checkFile(t *testing.T, path, want string, perm os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("read %s: %v", path, err)
		return
	}
	if string(b) != want {
		t.Errorf("%s: %d bytes, want %d", path, len(b), len(want))
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() != perm {
		t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), perm)
	}
}

func TestParseModinfoDepends(t *testing.T) {
	info := []byte("license=GPL\x00depends=virtio,virtio_ring,virtio-pci-modern-dev,virtio\x00name=virtio_pci\x00depends=\x00")
	got := strings.Join(ParseModinfoDepends(info), " ")
	if want := "virtio virtio_ring virtio_pci_modern_dev"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func FuzzParseModinfoDepends(f *testing.F) {
	f.Add([]byte("depends=a,b\x00name=c\x00"))
	f.Add([]byte("depends=\x00depends=,,x-y"))
	f.Add([]byte("depends=../../etc,a/b"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, d := range ParseModinfoDepends(b) {
			if !validModuleName(d) || strings.Contains(d, "-") {
				t.Fatalf("returned invalid name %q", d)
			}
		}
	})
}

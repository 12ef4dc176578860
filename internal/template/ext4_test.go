package template

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
)

// TestBuildFromExt4: a template from an ext4 image (as a vm sandbox's disk
// snapshot is) holds the image's files, owners and links, and what every
// template gets (/.space, /etc/hostname); the image's symlink to a host
// path is kept as a link, never followed.
func TestBuildFromExt4(t *testing.T) {
	testenv.RequiresRoot(t) // owners are kept only as root
	mkfs := testenv.RequiresTool(t, "mkfs.ext4")
	tree := t.TempDir()
	os.MkdirAll(filepath.Join(tree, "app"), 0o755)
	os.WriteFile(filepath.Join(tree, "app", "built"), []byte("built in a vm\n"), 0o640)
	os.Chown(filepath.Join(tree, "app", "built"), 1000, 1000)
	os.Symlink("/etc/shadow", filepath.Join(tree, "app", "out"))
	img := filepath.Join(t.TempDir(), "disk.img")
	f, _ := os.Create(img)
	f.Truncate(32 << 20)
	f.Close()
	if out, err := exec.Command(mkfs, "-q", "-F", "-d", tree, img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	src, err := ParseSource("ext4:" + img)
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "tpl")
	if err := Build(context.Background(), src, dest, nil); err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(filepath.Join(dest, "app", "built"))
	if err != nil || string(body) != "built in a vm\n" {
		t.Errorf("app/built = %q, %v", body, err)
	}
	if fi, err := os.Lstat(filepath.Join(dest, "app", "built")); err != nil || fi.Mode().Perm() != 0o640 || !ownedBy(fi, 1000) {
		t.Errorf("app/built: %v, %v; want mode 0640, owner 1000", fi.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(dest, "app", "out")); err != nil || target != "/etc/shadow" {
		t.Errorf("app/out -> %q, %v; want the link kept", target, err)
	}
	for _, p := range []string{".space", "etc/hostname"} {
		if _, err := os.Lstat(filepath.Join(dest, p)); err != nil {
			t.Errorf("/%s: %v", p, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dest, "lost+found")); !os.IsNotExist(err) {
		t.Errorf("/lost+found: %v, want none (the filesystem's, not the sandbox's)", err)
	}
}

func ownedBy(fi os.FileInfo, uid uint32) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == uid
}

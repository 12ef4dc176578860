package template

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// checkFinished checks what every template gets.
func checkFinished(t *testing.T, dest string) {
	t.Helper()
	if fi, err := os.Lstat(filepath.Join(dest, ".space")); err != nil || !fi.IsDir() {
		t.Errorf("/.space = %v, %v; want a directory", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "etc/hostname")); err != nil || string(b) != Hostname+"\n" {
		t.Errorf("/etc/hostname = %q, %v", b, err)
	}
}

func TestBuildFromDir(t *testing.T) {
	src := t.TempDir()
	outsideFile := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outsideFile, []byte("host secret"), 0o600)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(src, "usr/bin/tool"), []byte("tool"), 0o750))
	must(os.Symlink("usr/bin", filepath.Join(src, "bin")))
	must(os.Symlink(outsideFile, filepath.Join(src, "escape")))
	must(os.Symlink("../../../../../../../etc", filepath.Join(src, "up")))
	must(os.Link(filepath.Join(src, "usr/bin/tool"), filepath.Join(src, "usr/bin/tool2")))
	must(syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600))
	must(os.Mkdir(filepath.Join(src, "locked"), 0o500))
	if os.Geteuid() == 0 {
		must(os.Lchown(filepath.Join(src, "usr/bin/tool"), 1234, 5678))
	}
	// After the chown, which clears setuid.
	must(os.Chmod(filepath.Join(src, "usr/bin/tool"), 0o750|os.ModeSetuid))

	source, err := ParseSource("dir:" + src)
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "tpl")
	var progress bytes.Buffer
	if err := Build(t.Context(), source, dest, &progress); err != nil {
		t.Fatalf("Build: %v", err)
	}
	checkFinished(t, dest)
	// tool and its hard link tool2: the link is not a copy.
	if got, want := progress.String(), "copied 1 files, 4 B\n"; !strings.HasSuffix(got, want) {
		t.Errorf("progress = %q, want it to end with %q", got, want)
	}
	if got, _ := os.Readlink(filepath.Join(dest, "escape")); got != outsideFile {
		t.Errorf("escape link = %q, want copied as a link to %q", got, outsideFile)
	}
	if fi, _ := os.Lstat(filepath.Join(dest, "up")); fi == nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("up = %v, want a symlink (not followed)", fi)
	}
	fi, err := os.Stat(filepath.Join(dest, "usr/bin/tool"))
	if err != nil || fi.Mode().Perm() != 0o750 || fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("tool = %v, %v; want setuid 0750", fi, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if os.Geteuid() == 0 && (st.Uid != 1234 || st.Gid != 5678) {
		t.Errorf("tool owner = %d:%d, want 1234:5678", st.Uid, st.Gid)
	}
	fi2, _ := os.Stat(filepath.Join(dest, "usr/bin/tool2"))
	if fi2 == nil || !os.SameFile(fi, fi2) {
		t.Error("hard link not preserved")
	}
	if fi, _ := os.Lstat(filepath.Join(dest, "fifo")); fi == nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Error("fifo not copied")
	}
	if fi, _ := os.Stat(filepath.Join(dest, "locked")); fi == nil || fi.Mode().Perm() != 0o500 {
		t.Errorf("locked dir mode = %v", fi)
	}
	if n, err := Size(dest); err != nil || n != int64(len("tool")+len(Hostname)+1) {
		t.Errorf("Size = %d, %v; want tool counted once plus hostname", n, err)
	}
}

func TestBuildRefusesNonEmptyDest(t *testing.T) {
	dest := t.TempDir()
	os.WriteFile(filepath.Join(dest, "x"), nil, 0o644)
	if err := Build(t.Context(), Source{Kind: KindDir, Path: t.TempDir()}, dest, nil); err == nil {
		t.Fatal("Build into a non-empty destination succeeded")
	}
}

// TestFinishRefusesSymlinkedEtc checks that a source whose /etc is a symlink
// cannot make the builder write /etc/hostname on the host.
func TestFinishRefusesSymlinkedEtc(t *testing.T) {
	src := t.TempDir()
	victim := t.TempDir()
	os.Symlink(victim, filepath.Join(src, "etc"))
	err := Build(t.Context(), Source{Kind: KindDir, Path: src}, filepath.Join(t.TempDir(), "tpl"), nil)
	if err == nil {
		t.Fatal("Build with /etc a symlink succeeded")
	}
	if entries, _ := os.ReadDir(victim); len(entries) != 0 {
		t.Fatalf("builder wrote through the /etc symlink: %v", entries)
	}
}

func TestMinimal(t *testing.T) {
	if _, ok := staticBusybox(); !ok && os.Geteuid() != 0 {
		t.Skip("no static busybox and not root to install busybox-static")
	}
	dest := filepath.Join(t.TempDir(), "minimal")
	if err := Minimal(t.Context(), dest); err != nil {
		t.Fatalf("Minimal: %v", err)
	}
	checkFinished(t, dest)
	for _, p := range []string{"bin/busybox", "etc/passwd", "etc/group", "tmp", "home/user", "root"} {
		if _, err := os.Lstat(filepath.Join(dest, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if got, _ := os.Readlink(filepath.Join(dest, "bin/sh")); got != "/bin/busybox" {
		t.Errorf("bin/sh -> %q, want /bin/busybox", got)
	}
	passwd, _ := os.ReadFile(filepath.Join(dest, "etc/passwd"))
	if !strings.Contains(string(passwd), "user:x:1000:1000:user:/home/user:") {
		t.Errorf("passwd lacks user 1000: %q", passwd)
	}
	if fi, _ := os.Stat(filepath.Join(dest, "tmp")); fi == nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("tmp mode = %v, want sticky 0777", fi)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: skipping the chroot shell check")
		return
	}
	if fi, _ := os.Stat(filepath.Join(dest, "home/user")); fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Error("home/user not owned by uid 1000")
	}
	out, err := exec.CommandContext(t.Context(), "chroot", dest, "/bin/sh", "-c", "echo ok; id -u user").CombinedOutput()
	if err != nil || string(out) != "ok\n1000\n" {
		t.Fatalf("chroot sh = %q, %v; want \"ok\\n1000\\n\"", out, err)
	}
}

// TestBase builds the real base template with debootstrap. It downloads
// packages and takes minutes, so it runs only when SPACE_TEST_DEBOOTSTRAP=1.
func TestBase(t *testing.T) {
	if os.Getenv("SPACE_TEST_DEBOOTSTRAP") != "1" {
		t.Skip("slow (debootstrap downloads Debian): set SPACE_TEST_DEBOOTSTRAP=1 to run")
	}
	if os.Geteuid() != 0 {
		t.Skip("debootstrap needs root")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Skip("debootstrap not installed")
	}
	dest := filepath.Join(t.TempDir(), "base")
	if err := Base(t.Context(), dest, testWriter{t}); err != nil {
		t.Fatalf("Base: %v", err)
	}
	checkFinished(t, dest)
	out, err := exec.CommandContext(t.Context(), "chroot", dest, "/bin/bash", "-c",
		"python3 -c 'print(1+1)' && git --version >/dev/null && curl --version >/dev/null && id -u user && echo $HOME").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "2\n1000\n") {
		t.Fatalf("tools in base = %q, %v", out, err)
	}
	if lists, _ := filepath.Glob(filepath.Join(dest, "var/lib/apt/lists/*_Packages")); len(lists) != 0 {
		t.Errorf("apt lists not cleaned: %v", lists)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestBuildRefusesWritableRootPATH (catalogue A-8): a template in which a
// directory on root's PATH — or one above it, through symlinks too — is
// writable by group or others is refused with the directory named; sticky
// /tmp-like parents and the usual layout pass.
func TestBuildRefusesWritableRootPATH(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	for name, tc := range map[string]struct {
		setup func(src string)
		want  string // "" for accepted
	}{
		"usual layout": {func(src string) {
			os.MkdirAll(filepath.Join(src, "usr/local/bin"), 0o755)
			os.Symlink("usr/bin", filepath.Join(src, "bin"))
			os.MkdirAll(filepath.Join(src, "usr/bin"), 0o755)
		}, ""},
		"world-writable /usr/local/bin": {func(src string) {
			os.MkdirAll(filepath.Join(src, "usr/local/bin"), 0o755)
			os.Chmod(filepath.Join(src, "usr/local/bin"), 0o777)
		}, "/usr/local/bin is writable by its group or others"},
		"group-writable /usr through /bin's symlink": {func(src string) {
			os.MkdirAll(filepath.Join(src, "usr/bin"), 0o755)
			os.Chmod(filepath.Join(src, "usr"), 0o775)
			os.Symlink("/usr/bin", filepath.Join(src, "bin"))
		}, "/usr is writable by its group or others"},
		"symlinked PATH dir into a writable one": {func(src string) {
			os.MkdirAll(filepath.Join(src, "usr/bin"), 0o755)
			os.MkdirAll(filepath.Join(src, "srv/drop"), 0o755)
			os.Chmod(filepath.Join(src, "srv/drop"), 0o777|os.ModeSticky)
			os.MkdirAll(filepath.Join(src, "usr/local"), 0o755)
			os.Symlink("../../srv/drop", filepath.Join(src, "usr/local/sbin"))
		}, "/srv/drop is writable by its group or others"},
		"sticky parent": {func(src string) {
			os.MkdirAll(filepath.Join(src, "opt/tools/bin"), 0o755)
			os.Chmod(filepath.Join(src, "opt"), 0o777|os.ModeSticky)
			os.MkdirAll(filepath.Join(src, "usr"), 0o755)
			os.Symlink("../opt/tools/bin", filepath.Join(src, "usr/bin"))
		}, ""},
	} {
		src := t.TempDir()
		tc.setup(src)
		source, err := ParseSource("dir:" + src)
		if err != nil {
			t.Fatal(err)
		}
		err = Build(t.Context(), source, filepath.Join(t.TempDir(), "tpl"), nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Build = %v, want it built", name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errdefs.ErrInvalidArgument)):
			t.Errorf("%s: Build = %v, want an invalid-argument refusal naming %q", name, err, tc.want)
		}
	}
}

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDockerfileBuildVM builds a template from a Dockerfile in a vm build
// sandbox, the server's default runtime here (--default-runtime vm, as a
// vm-only deployment has), with the real QEMU: the RUN records the kernel
// it ran on, which must be the guest's, not the host's. The template, made
// from the vm disk snapshot's ext4 image, serves both runtimes: an ns and
// a vm sandbox of it see the RUN's and the COPY's files. A rebuild with
// --build-runtime ns reuses none of the vm holder's cached steps (a fork
// keeps its holder's runtime) and runs on the host's kernel.
func TestDockerfileBuildVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
	in := startServerWith(t, newDataDir(t), "--default-runtime", "vm")
	defer in.stop()
	dir := t.TempDir()
	df := filepath.Join(dir, "Dockerfile")
	os.WriteFile(filepath.Join(dir, "one.txt"), []byte("copied\n"), 0o644)
	if err := os.WriteFile(df, []byte("FROM minimal\nRUN uname -r > /built-on\nCOPY one.txt /one.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var host unix.Utsname
	unix.Uname(&host)
	hostKernel := unix.ByteSliceToString(host.Release[:]) + "\n"

	began := time.Now()
	_, stderr, code := in.cli("", "template", "build", "dfvm", "--dockerfile", df, "--context", dir, "--wait", "20m")
	if code != 0 {
		t.Fatalf("dockerfile build on the default runtime: exit %d\n%s\n%s", code, stderr, in.logs())
	}
	t.Logf("vm dockerfile build took %s", time.Since(began).Round(time.Millisecond))
	for _, rt := range []string{"ns", "vm"} {
		sb := in.createWith("dfvm", rt)
		res := in.exec(sb.ID, "cat", "/built-on", "/one.txt")
		t.Logf("%s sandbox of the vm-built template: %q (host kernel %q)", rt, res.Stdout, hostKernel)
		if !strings.HasSuffix(res.Stdout, "\ncopied\n") || strings.HasPrefix(res.Stdout, hostKernel) || res.Stdout == "\ncopied\n" {
			t.Errorf("%s sandbox of the vm-built template: %+v, want a guest kernel (not the host's %q) and the copied file", rt, res, hostKernel)
		}
		in.delete(sb.ID)
		in.waitGone(sb.ID)
	}
	holders := in.wantOnlyHolders()
	if len(holders) != 1 {
		t.Fatalf("after the vm build: %d cache holders, want 1", len(holders))
	}

	if _, e, c := in.cli("", "template", "delete", "dfvm"); c != 0 {
		t.Fatalf("template delete: exit %d: %s", c, e)
	}
	_, stderr, code = in.cli("", "template", "build", "dfvm", "--dockerfile", df, "--context", dir, "--build-runtime", "ns")
	if code != 0 {
		t.Fatalf("dockerfile build --build-runtime ns: exit %d\n%s\n%s", code, stderr, in.logs())
	}
	if strings.Contains(stderr, "cached:") {
		t.Errorf("the ns rebuild reused a step of the vm holder:\n%s", stderr)
	}
	sb := in.createWith("dfvm", "ns")
	if res := in.exec(sb.ID, "cat", "/built-on"); res.Stdout != hostKernel {
		t.Errorf("/built-on of the ns-built template: %q, want the host's kernel %q", res.Stdout, hostKernel)
	}
	in.delete(sb.ID)
	in.waitGone(sb.ID)
	in.cli("", "template", "cache", "prune")
}

package vm

// Helpers of the VMM cgroup tests (cgroup_test.go) that drive a guest and
// read QEMU from the host.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/vmimage"
)

// guestClient connects to the guest daemon on inst's channel and waits
// until it answers.
func guestClient(t *testing.T, ctx context.Context, inst *driver.Instance) *guest.Client {
	t.Helper()
	conn, err := net.FileConn(inst.Channel)
	inst.Channel.Close()
	if err != nil {
		t.Fatal(err)
	}
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Wait(ctx); err != nil {
		t.Fatalf("the guest never answered: %v", err)
	}
	return c
}

// buildGuestProgram builds testdata/<name> for the guest (static).
func buildGuestProgram(t *testing.T, name string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", out, "./testdata/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// uploadFile writes data to path in the guest through the file API.
func uploadFile(t *testing.T, ctx context.Context, c *guest.Client, path string, data []byte) {
	t.Helper()
	u := guest.BaseURL + "/files?path=" + url.QueryEscape(path) + "&username=root"
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("POST /files %s: %v", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST /files %s: %s", path, resp.Status)
	}
}

// guestRun runs script with /bin/sh in the guest and returns its stdout and
// exit code, or why it has none (the VM died, say).
func guestRun(c *guest.Client, script string) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	stream, err := c.Process().Start(ctx, connect.NewRequest(&processv1.StartRequest{
		Process: &processv1.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}},
	}))
	if err != nil {
		return "", 0, fmt.Errorf("start %q: %w", script, err)
	}
	var out strings.Builder
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
		if e := stream.Msg().GetEvent().GetEnd(); e != nil {
			return out.String(), int(e.GetExitCode()), nil
		}
	}
	return out.String(), 0, fmt.Errorf("%q: no end event: %v", script, stream.Err())
}

// memHogProgram is an awk program that allocates and touches mib MiB, one
// MiB at a time (the guest kernel kills it when it cannot back it).
func memHogProgram(mib int) string {
	return fmt.Sprintf(`BEGIN { for (i = 0; i < %d; i++) a[i] = sprintf("%%1048576d", i); print "allocated" }`, mib)
}

// statusKiB reads a numeric field of /proc/<pid>/status (kB for the Vm
// fields).
func statusKiB(t *testing.T, pid int, field string) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("QEMU pid %d: %v", pid, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != field {
			continue
		}
		n, err := strconv.ParseUint(strings.Fields(v)[0], 10, 64)
		if err != nil {
			t.Fatalf("%s: %q", field, sc.Text())
		}
		return n
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// jitInfo is the size of the code in QEMU's translation buffer (HMP info
// jit), or why it could not be read.
func jitInfo(t *testing.T, ctx context.Context, d *Driver, st *state) string {
	s, err := d.openQMP(ctx, st)
	if err != nil {
		return err.Error()
	}
	defer s.Close()
	out, err := s.run("human-monitor-command", map[string]string{"command-line": "info jit"})
	if err != nil {
		return err.Error()
	}
	var text string
	if err := json.Unmarshal(out, &text); err != nil {
		return string(out)
	}
	var keep []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "gen code size") || strings.Contains(line, "TB flush count") {
			keep = append(keep, strings.Join(strings.Fields(line), " "))
		}
	}
	return strings.Join(keep, "; ")
}

// dmesgTail is the end of the kernel log (an OOM kill's report), or why it
// cannot be read.
func dmesgTail() string {
	out, err := exec.Command("dmesg").Output()
	if err != nil {
		return err.Error()
	}
	if len(out) > 2048 {
		out = out[len(out)-2048:]
	}
	return string(out)
}

// fakeKernel is a kernel file for a driver that starts no VM.
func fakeKernel(t *testing.T) *vmimage.Kernel {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vmlinuz")
	if err := os.WriteFile(p, []byte("kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &vmimage.Kernel{Vmlinuz: p}
}

package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSplitProcessesUnprivilegedNode runs the control plane, the root
// node-manager and an unprivileged `space node` as three processes, the way a
// multi-node deployment does: the node registers with its join token, the
// sandbox manager and host bridges run as nobody, and only the node-manager is
// root.
func TestSplitProcessesUnprivilegedNode(t *testing.T) {
	if bin.err != nil {
		t.Fatal(bin.err)
	}
	const nobody = 65534
	base := newDataDir(t)
	// The unprivileged node must reach the binaries and the node-manager socket.
	for _, d := range []string{bin.dir, filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	serverDir, pmDir, nodeDir := filepath.Join(base, "server"), filepath.Join(base, "pm"), filepath.Join(base, "node")
	for _, d := range []string{serverDir, pmDir, nodeDir} {
		os.MkdirAll(d, 0o755)
	}
	if err := os.Chown(nodeDir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	os.Chmod(nodeDir, 0o700)

	srv := exec.Command(bin.space, "server", "--listen", "127.0.0.1:0", "--data-dir", serverDir, "--no-base-template")
	in := &instance{t: t, dataDir: serverDir, exited: make(chan struct{}), cmd: srv}
	srv.Stderr = &lockedWriter{in: in}
	stdout, _ := srv.StdoutPipe()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { srv.Wait(); close(in.exited) }()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "SPACE_API_URL="); ok {
			in.url = v
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	if in.url == "" {
		t.Fatalf("server did not start:\n%s", in.logs())
	}
	key, _ := os.ReadFile(filepath.Join(serverDir, "admin.key"))
	in.key = strings.TrimSpace(string(key))
	join, _ := os.ReadFile(filepath.Join(serverDir, "join.token"))

	pmSock := filepath.Join(pmDir, "run", "node-manager.sock")
	pm := exec.Command(bin.space, "node-manager", "--data-dir", pmDir, "--socket", pmSock, "--allow-uid", "65534", "--kernel-build", "wait")
	pm.Stderr = &lockedWriter{in: in}
	if err := pm.Start(); err != nil {
		t.Fatal(err)
	}
	node := exec.Command(bin.space, "node", "--server", in.url, "--join-token", strings.TrimSpace(string(join)),
		"--data-dir", nodeDir, "--id", "worker-1", "--node-manager", pmSock, "--listen", "unix:"+filepath.Join(nodeDir, "node.sock"))
	node.Stderr = &lockedWriter{in: in}
	node.Env = []string{"PATH=/usr/bin:/bin"}
	node.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	stopAll := func() {
		stopNodeProcesses(t, in, node, pm)
		in.stop()
	}
	defer stopAll()

	in.waitTemplate("minimal")
	sb := in.create("minimal")
	if sb.Node != "worker-1" {
		t.Errorf("sandbox on node %q, want worker-1", sb.Node)
	}
	if res := in.exec(sb.ID, "sh", "-c", "echo split; id -u"); res.Stdout != "split\n1000\n" {
		t.Errorf("exec = %+v", res)
	}
	// The host bridge runs as the node's unprivileged user.
	for _, p := range processesMentioning(nodeDir) {
		pid := strings.SplitN(p, ":", 2)[0]
		st, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "Uid:") && !strings.Contains(l, "65534") {
				t.Errorf("process %s runs as %s, want nobody", p, l)
			}
		}
	}
	in.delete(sb.ID)
}

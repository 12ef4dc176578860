package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/failpoint"
)

// TestNodeProcessFailpoints kills -9 a `space node` that runs as its own
// process (the scale-out topology: a --dev server, here with its SQLite
// store, and a second node, node-b, with its own node-manager and data
// directory) at each of the node's own failpoints — the points of the
// registry that the node part of a server process hits — by arming the
// point in that node's environment only. The server and node-b's
// node-manager live on; the node dies there (status 137, the point
// named) and is started again, unarmed, on the same data directory. After
// it the operation completes (a create repeated with its Idempotency-Key
// finds its one sandbox running, a hibernation finishes and restores),
// what was acknowledged before is kept, and once the test's sandboxes are
// deleted the object store is empty and node-b's host holds nothing for
// them it did not hold before (processes, mounts, loop devices,
// subvolumes, netns, cgroups).
func TestNodeProcessFailpoints(t *testing.T) {
	dirA := newDataDir(t)
	in := startServer(t, dirA)
	defer in.stop()
	in.waitTemplate("minimal")
	dirB := newDataDir(t)
	nb := startArmedNodeB(t, in, dirA, dirB)
	defer nb.stop()
	nb.start("")
	waitNodes(t, in, "local", "node-b")
	// Every sandbox goes to node-b.
	if _, e, c := in.cli("", "nodes", "drain", "local"); c != 0 {
		t.Fatalf("nodes drain local: %d %s\n%s", c, e, in.logs())
	}
	before := inventory(dirB)

	var points []*failpoint.Point
	for _, p := range failpoint.All() {
		if p.Process == failpoint.Server && strings.HasPrefix(p.Doc, "node:") {
			points = append(points, p)
		}
	}
	if len(points) < 3 {
		t.Fatalf("the registry has the node points %v, want create/after-runtime, create/after-bridge and hibernate/after-part at least", points)
	}
	for _, p := range points {
		spec := p.Name + "=exit"
		if p == failpoint.HibernateAfterPart {
			spec += "@1" // an ns snapshot's 2 artifacts: after the first
		}
		t.Run(p.Name, func(sub *testing.T) {
			// The helpers fail the test they are given: this one.
			in.t, nb.t = sub, sub
			defer func() { in.t, nb.t = t, t }()
			t := sub
			ids := nb.crashAt(t, p, spec)
			for _, id := range ids {
				in.do("DELETE", "/v1/sandboxes/"+id, nil, nil)
				in.waitGone(id)
			}
			in.waitNoObjects(fileStore)
			// The node started again after the crash is node-b's,
			// not a leftover: it counts as before.
			checkInventory(t, append(before, inventory(dirB).only("process "+strconv.Itoa(nb.node.Process.Pid)+" ")...), dirB, ids...)
		})
	}
}

// armedNodeB is node-b of TestNodeProcessFailpoints: a node-manager that
// runs for the whole test and a node process started (and killed) once
// per failpoint.
type armedNodeB struct {
	t          *testing.T
	in         *instance
	dirA, dirB string
	join, sock string
	pm, node   *exec.Cmd
	exited     chan struct{}
	// pmExited is closed when pm ends, once watchPM watches it
	// (TestNodeManagerFailpoints restarts the node-manager); nil else.
	pmExited chan struct{}
}

func startArmedNodeB(t *testing.T, in *instance, dirA, dirB string) *armedNodeB {
	t.Helper()
	join, err := os.ReadFile(filepath.Join(dirA, "join.token"))
	if err != nil {
		t.Fatal(err)
	}
	nb := &armedNodeB{t: t, in: in, dirA: dirA, dirB: dirB, join: strings.TrimSpace(string(join)),
		sock: filepath.Join(dirB, "run", "node-manager.sock")}
	nb.pm = exec.Command(bin.space, "node-manager", "--data-dir", dirB, "--socket", nb.sock, "--kernel-build", "wait")
	nb.pm.Stderr = &lockedWriter{in: in}
	if err := nb.pm.Start(); err != nil {
		t.Fatal(err)
	}
	return nb
}

// start starts node-b's node process, armed with spec when it is not
// empty.
func (nb *armedNodeB) start(spec string) {
	nb.t.Helper()
	nb.node = exec.Command(bin.space, "node", "--server", nb.in.url, "--join-token", nb.join,
		"--data-dir", nb.dirB, "--id", "node-b", "--node-manager", nb.sock, "--listen", "unix:"+filepath.Join(nb.dirB, "run", "node.sock"),
		"--object-store", "file://"+filepath.Join(nb.dirA, "objects"), "--kms-dir", filepath.Join(nb.dirA, "kms"))
	nb.node.Env = os.Environ()
	if spec != "" {
		nb.node.Env = append(nb.node.Env, failpoint.EnvVar+"="+spec)
	}
	nb.node.Stderr = &lockedWriter{in: nb.in}
	if err := nb.node.Start(); err != nil {
		nb.t.Fatal(err)
	}
	done := make(chan struct{})
	cmd := nb.node
	go func() { cmd.Wait(); close(done) }()
	nb.exited = done
}

// waitLive waits until the server sees node-b live and offering ns.
func (nb *armedNodeB) waitLive() {
	nb.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		var list struct {
			Nodes []struct {
				ID       string   `json:"id"`
				Runtimes []string `json:"runtimes"`
				Live     bool     `json:"live"`
			} `json:"nodes"`
		}
		nb.in.do("GET", "/v1/nodes", nil, &list)
		for _, n := range list.Nodes {
			if n.ID == "node-b" && n.Live && strings.Contains(" "+strings.Join(n.Runtimes, " ")+" ", " ns ") {
				return
			}
		}
		if time.Now().After(deadline) {
			nb.t.Fatalf("node-b not live with ns within 2m: %+v\n%s", list, nb.in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// crashAt restarts node-b's node armed with spec, runs p's operation on
// it, sees the node die at p, starts it again unarmed and checks the
// outcome. It returns the sandboxes the run made.
func (nb *armedNodeB) crashAt(t *testing.T, p *failpoint.Point, spec string) []string {
	in := nb.in
	nb.restart(spec)
	var id string
	if p.Op != "create" {
		id = in.createWith("minimal", "ns").ID
		in.exec(id, "sh", "-c", "echo acknowledged > "+ackFile)
	}
	idem := "node-failpoint-" + strings.ReplaceAll(p.Name, "/", "-")
	createBody := `{"template":"minimal","runtime":"ns","memory_mib":256}`
	switch p.Op {
	case "create":
		in.send("POST", "/v1/sandboxes", createBody, idem)
	case "hibernate":
		in.send("POST", "/v1/sandboxes/"+id+"/hibernate", "", "")
	default:
		t.Fatalf("node failpoint %s: this test does not know how to drive operation %q; add it", p.Name, p.Op)
	}
	select {
	case <-nb.exited:
	case <-time.After(3 * time.Minute):
		t.Fatalf("failpoint %s armed: node-b did not die within 3m\n%s", p.Name, in.logs())
	}
	line := "failpoint " + p.Name + ": exit"
	if code := nb.node.ProcessState.ExitCode(); code != failpoint.ExitCode || !strings.Contains(in.logs(), line) {
		t.Fatalf("failpoint %s armed: node-b exited with %d, want %d at the point\n%s", p.Name, code, failpoint.ExitCode, in.logs())
	}
	select {
	case <-in.exited:
		t.Fatalf("the server exited with node-b\n%s", in.logs())
	default:
	}
	nb.start("")
	nb.waitLive()

	ids := []string{id}
	switch p.Op {
	case "create":
		var sb struct {
			sandbox
			Message string `json:"message"`
		}
		for deadline := time.Now().Add(3 * time.Minute); ; {
			code := in.doIdem(idem, "POST", "/v1/sandboxes", []byte(createBody), &sb)
			if code == http.StatusCreated && sb.State == "running" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("create repeated after node-b's crash: HTTP %d %+v\n%s", code, sb, in.logs())
			}
			time.Sleep(time.Second)
		}
		if sb.Node != "node-b" {
			t.Fatalf("the created sandbox runs on %q, want node-b", sb.Node)
		}
		ids = []string{sb.ID}
		in.exec(sb.ID, "sh", "-c", "echo acknowledged > "+ackFile)
		in.wantAck(sb.ID, "after the create")
		if inv := inventory(nb.dirB, sb.ID); !inventorySees(inv, "subvolume", "cgroup") {
			t.Fatalf("the inventory of a running sandbox misses a kind:\n%s", strings.Join(inv, "\n"))
		}
		nb.wantOneExecution(sb.ID)
	case "hibernate":
		if got := in.settle(id, "hibernate"); got.State != "hibernated" {
			t.Fatalf("after node-b's crash: %+v, want hibernated\n%s", got, in.logs())
		}
		in.mustDo("POST", "/v1/sandboxes/"+id+"/restore", "")
		if got := in.settle(id, "restore"); got.State != "running" || got.Node != "node-b" {
			t.Fatalf("restore after the crashed hibernation: %+v, want running on node-b\n%s", got, in.logs())
		}
		in.wantAck(id, "restore after the crashed hibernation")
		nb.wantOneExecution(id)
	}
	return ids
}

// restart stops node-b's node (SIGTERM) and starts it armed with spec.
func (nb *armedNodeB) restart(spec string) {
	nb.t.Helper()
	nb.node.Process.Signal(syscall.SIGTERM)
	select {
	case <-nb.exited:
	case <-time.After(30 * time.Second):
		nb.node.Process.Kill()
		<-nb.exited
	}
	nb.start(spec)
	nb.waitLive()
}

// wantOneExecution is instance.wantOneExecution on node-b's data
// directory.
func (nb *armedNodeB) wantOneExecution(id string) {
	nb.t.Helper()
	nb.in.wantOneExecutionIn(nb.dirB, id, "on node-b")
}

// stop deletes every sandbox and stops node-b's node and node-manager.
func (nb *armedNodeB) stop() {
	stopNodeProcesses(nb.t, nb.in) // the deletes
	if nb.node != nil {
		nb.node.Process.Signal(syscall.SIGTERM)
		select {
		case <-nb.exited:
		case <-time.After(30 * time.Second):
			nb.t.Errorf("node-b did not stop within 30s of SIGTERM")
			nb.node.Process.Kill()
			<-nb.exited
		}
	}
	if nb.pmExited == nil {
		stopNodeProcesses(nb.t, nb.in, nb.pm)
		return
	}
	nb.pm.Process.Signal(syscall.SIGTERM)
	select {
	case <-nb.pmExited:
	case <-time.After(30 * time.Second):
		nb.t.Errorf("node-b's node-manager did not stop within 30s of SIGTERM")
		nb.pm.Process.Kill()
		<-nb.pmExited
	}
}

// only is what of inv begins with prefix.
func (inv hostInventory) only(prefix string) hostInventory {
	var out hostInventory
	for _, s := range inv {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}

package e2e

import (
	"context"
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
	"github.com/spacesandbox/space/internal/privop"
)

// TestNodeManagerFailpoints kills the node-manager — the node's root
// process, as its own process — at each of its failpoints (every point of
// the registry whose Process is the node-manager: create, a start from a
// snapshot, snapshot, pause, resume, hibernate's export and local delete,
// restore's import, delete and template build), while the control plane
// and the node that calls it live on. The topology is
// TestNodeProcessFailpoints': a --dev server (drained) and node-b, a
// `space node` with a node-manager of its own. Per point the test restarts
// node-b's node-manager armed with it, drives the point's operation on
// node-b, sees the node-manager die there (status 137, the point named),
// and starts it again unarmed on the same data directory, as systemd's
// Restart= would. After it the operation completes (a template build cut
// so is built again by the server once the node-manager answers), what
// was acknowledged before is kept, a sandbox whose snapshot, pause or
// resume was cut keeps its execution (sandboxes outlive the node-manager),
// a running sandbox has one execution of its current generation on the
// host, the next operation works (a sandbox
// is created and serves), and once the test's sandboxes are deleted the
// object store is empty and node-b's host holds nothing for them it did
// not hold before (processes, mounts, loop devices, subvolumes, netns,
// cgroups).
func TestNodeManagerFailpoints(t *testing.T) {
	dirA := newDataDir(t)
	in := startServer(t, dirA)
	defer in.stop()
	in.waitTemplate("minimal")
	dirB := newDataDir(t)
	nb := startArmedNodeB(t, in, dirA, dirB)
	defer nb.stop()
	nb.watchPM()
	nb.start("")
	waitNodes(t, in, "local", "node-b")
	if _, e, c := in.cli("", "nodes", "drain", "local"); c != 0 {
		t.Fatalf("nodes drain local: %d %s\n%s", c, e, in.logs())
	}
	// node-b's own processes are restarted during the test, and a
	// node-manager stopped with no sandbox left detaches its store's
	// loop device: the host holds them before and after, under other
	// pids and device numbers.
	before := nb.ownLess(inventory(dirB))

	var points []*failpoint.Point
	for _, p := range failpoint.All() {
		if p.Process == failpoint.NodeManager {
			points = append(points, p)
		}
	}
	if len(points) < 10 {
		t.Fatalf("the registry has %d node-manager points, want create, restore, snapshot, pause, resume, hibernate, delete and template ones", len(points))
	}
	// A point is driven by its own operation and by every other one whose
	// work passes it: a stop, a fork and a hibernation take a disk
	// snapshot; a stop and a hibernation release the execution; a start
	// after stop, a rollback and a fork's child start from a snapshot.
	also := map[*failpoint.Point][]string{
		failpoint.NodeManagerAfterVolumeSnapshot:  {"stop", "fork", "hibernate"},
		failpoint.NodeManagerAfterSnapshotInfo:    {"stop", "fork", "hibernate"},
		failpoint.NodeManagerAfterKill:            {"stop", "hibernate"},
		failpoint.NodeManagerAfterRootDelete:      {"stop", "hibernate"},
		failpoint.NodeManagerAfterSnapshotClone:   {"start", "rollback", "fork"},
		failpoint.NodeManagerAfterSnapshotRuntime: {"start", "rollback", "fork"},
	}
	type run struct {
		p  *failpoint.Point
		op string
	}
	var runs []run
	for _, p := range points {
		runs = append(runs, run{p, p.Op})
		for _, op := range also[p] {
			runs = append(runs, run{p, op})
		}
	}
	for i, r := range runs {
		name := r.p.Name
		if r.op != r.p.Op {
			name += "/via-" + r.op
		}
		t.Run(name, func(sub *testing.T) {
			in.t, nb.t = sub, sub
			defer func() { in.t, nb.t = t, t }()
			t := sub
			ids, template := nb.crashNodeManagerAt(t, r.p, r.op, i)
			for _, id := range ids {
				in.do("DELETE", "/v1/sandboxes/"+id, nil, nil)
				in.waitGone(id)
			}
			if template != "" {
				if code := in.do("DELETE", "/v1/templates/"+template, nil, nil); code >= 300 {
					t.Errorf("delete template %s: HTTP %d", template, code)
				}
			}
			in.waitNoObjects(fileStore)
			in.waitNoVolumesIn(dirB, ids)
			checkInventory(t, append(before, nb.own(inventory(dirB))...), dirB, ids...)
		})
	}
}

// watchPM has nb restartable as its node-manager dies: exited is closed
// when the one running ends.
func (nb *armedNodeB) watchPM() {
	done := make(chan struct{})
	cmd := nb.pm
	go func() { cmd.Wait(); close(done) }()
	nb.pmExited = done
}

// startPM starts node-b's node-manager armed with spec (none when empty)
// and waits until it answers on its socket.
func (nb *armedNodeB) startPM(spec string) {
	nb.t.Helper()
	nb.pm = exec.Command(bin.space, "node-manager", "--data-dir", nb.dirB, "--socket", nb.sock, "--kernel-build", "wait")
	nb.pm.Env = os.Environ()
	if spec != "" {
		nb.pm.Env = append(nb.pm.Env, failpoint.EnvVar+"="+spec)
	}
	nb.pm.Stderr = &lockedWriter{in: nb.in}
	if err := nb.pm.Start(); err != nil {
		nb.t.Fatal(err)
	}
	nb.watchPM()
	pm := privop.NewClient(nb.sock)
	for deadline := time.Now().Add(2 * time.Minute); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		h, err := pm.Hello(ctx)
		cancel()
		if err == nil && h.Pid == nb.pm.Process.Pid {
			return
		}
		select {
		case <-nb.pmExited:
			nb.t.Fatalf("node-b's node-manager exited at start: %v\n%s", nb.pm.ProcessState, nb.in.logs())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			nb.t.Fatalf("node-b's node-manager does not answer within 2m: %v\n%s", err, nb.in.logs())
		}
	}
}

// restartPM stops node-b's node-manager (SIGTERM, as an operator would)
// and starts it armed with spec.
func (nb *armedNodeB) restartPM(spec string) {
	nb.t.Helper()
	nb.pm.Process.Signal(syscall.SIGTERM)
	select {
	case <-nb.pmExited:
	case <-time.After(30 * time.Second):
		nb.t.Errorf("node-b's node-manager did not stop within 30s of SIGTERM")
		nb.pm.Process.Kill()
		<-nb.pmExited
	}
	nb.startPM(spec)
}

// own is what of inv node-b holds of its own as it runs now: its node's
// and its node-manager's processes and the loop device of its volume
// store's image (one: a second is a leak).
func (nb *armedNodeB) own(inv hostInventory) hostInventory {
	var out hostInventory
	loops := 0
	for _, s := range inv {
		if nb.isOwn(s) {
			out = append(out, s)
			if strings.HasPrefix(s, "loop ") {
				loops++
			}
		}
	}
	if loops > 1 {
		nb.t.Errorf("node-b's volume store image is on %d loop devices, want 1:\n%s", loops, strings.Join(out, "\n"))
	}
	return out
}

// ownLess is inv without what node-b holds of its own (own).
func (nb *armedNodeB) ownLess(inv hostInventory) hostInventory {
	var out hostInventory
	for _, s := range inv {
		if !nb.isOwn(s) {
			out = append(out, s)
		}
	}
	return out
}

func (nb *armedNodeB) isOwn(s string) bool {
	for _, pid := range []int{nb.node.Process.Pid, nb.pm.Process.Pid} {
		if strings.HasPrefix(s, "process "+strconv.Itoa(pid)+" ") {
			return true
		}
	}
	return strings.HasPrefix(s, "loop ") && strings.HasSuffix(s, " "+filepath.Join(nb.dirB, "volumes.img"))
}

// crashNodeManagerAt runs operation op, which passes p, on node-b with
// its node-manager armed at p, sees the node-manager die there, starts it
// again unarmed and checks the outcome. It returns the sandboxes and the
// template (n names it) the run made.
func (nb *armedNodeB) crashNodeManagerAt(t *testing.T, p *failpoint.Point, op string, n int) (ids []string, template string) {
	in := nb.in
	nb.restartPM(p.Name + "=exit")
	var id string
	var gen uint64
	if op != "create" && op != "template" {
		sb := in.createWith("minimal", "ns")
		id, gen = sb.ID, sb.Generation
		in.exec(id, "sh", "-c", "echo acknowledged > "+ackFile)
	}
	// The state the operation starts from. The preparations pass none of
	// the node-manager's points an operation is driven through here but
	// their own.
	if prep, ok := map[string]string{"restore": "hibernate", "resume": "pause", "start": "stop"}[op]; ok {
		in.mustDo("POST", "/v1/sandboxes/"+id+"/"+prep, "")
		want := map[string]string{"stop": "stopped"}[prep]
		if want == "" {
			want = prep + "d"
		}
		if got := in.settle(id, prep); got.State != want {
			t.Fatalf("%s before the %s: %+v", prep, op, got)
		}
	}
	var rollbackTo string
	if op == "rollback" {
		var snap snapshotJSON
		if code := in.do("POST", "/v1/sandboxes/"+id+"/snapshots", map[string]string{"kind": "disk"}, &snap); code != http.StatusCreated {
			t.Fatalf("the snapshot to roll back to: HTTP %d %+v", code, snap)
		}
		rollbackTo = snap.ID
	}
	idem := "nm-failpoint-" + strings.ReplaceAll(p.Name, "/", "-")
	createBody := `{"template":"minimal","runtime":"ns","memory_mib":256}`
	if op == "template" {
		template = "nmfp" + strconv.Itoa(n)
	}
	switch op {
	case "create":
		in.send("POST", "/v1/sandboxes", createBody, idem)
	case "snapshot":
		in.send("POST", "/v1/sandboxes/"+id+"/snapshots", `{"kind":"disk"}`, "")
	case "hibernate", "restore", "pause", "resume", "stop", "start", "fork":
		in.send("POST", "/v1/sandboxes/"+id+"/"+op, "", "")
	case "rollback":
		in.send("POST", "/v1/sandboxes/"+id+"/rollback", `{"snapshot":"`+rollbackTo+`"}`, "")
	case "delete":
		in.send("DELETE", "/v1/sandboxes/"+id, "", "")
	case "template":
		in.send("POST", "/v1/templates", `{"name":"`+template+`","from":"minimal"}`, "")
	default:
		t.Fatalf("node-manager failpoint %s: this test does not know how to drive operation %q; add it", p.Name, op)
	}
	select {
	case <-nb.pmExited:
	case <-time.After(3 * time.Minute):
		t.Fatalf("failpoint %s armed: node-b's node-manager did not die within 3m\n%s", p.Name, in.logs())
	}
	line := "failpoint " + p.Name + ": exit"
	if code := nb.pm.ProcessState.ExitCode(); code != failpoint.ExitCode || !strings.Contains(in.logs(), line) {
		t.Fatalf("failpoint %s armed: node-b's node-manager exited with %d, want %d at the point\n%s", p.Name, code, failpoint.ExitCode, in.logs())
	}
	select {
	case <-in.exited:
		t.Fatalf("the server exited with node-b's node-manager\n%s", in.logs())
	case <-nb.exited:
		t.Fatalf("node-b's node exited with its node-manager (%v)\n%s", nb.node.ProcessState, in.logs())
	default:
	}
	// The node lives on; its node-manager comes back as a supervisor
	// would start it again.
	nb.startPM("")

	ids = []string{id}
	if op == "snapshot" || op == "pause" || op == "resume" {
		// The sandbox outlives the node-manager: the same execution.
		if got := in.settle(id, op); got.Generation != gen {
			t.Errorf("after the node-manager's crash at %s the sandbox is at generation %d, want %d: its execution did not outlive the node-manager", p.Name, got.Generation, gen)
		}
	}
	switch op {
	case "create":
		ids = []string{nb.wantCreated(idem, createBody)}
	case "snapshot":
		nb.wantRunning(id, "snapshot")
		for _, s := range in.settleSnapshots(id) {
			if s.State == "failed" && s.Reason == "" {
				t.Errorf("snapshot %s failed without a reason", s.ID)
			}
			if s.State == "ready" && s.Kind == "disk" && s.Tier == "manual" {
				// The crash lost the answer, not the snapshot: it restores.
				in.mustDo("POST", "/v1/sandboxes/"+id+"/rollback", `{"snapshot":"`+s.ID+`"}`)
				nb.wantRunning(id, "rollback to the snapshot")
			}
		}
	case "hibernate":
		if got := in.settle(id, "hibernate"); got.State != "hibernated" {
			t.Fatalf("after the node-manager's crash: %+v, want hibernated\n%s", got, in.logs())
		}
		in.mustDo("POST", "/v1/sandboxes/"+id+"/restore", "")
		nb.wantRunning(id, "restore after the crashed hibernation")
	case "restore", "resume", "start", "rollback":
		nb.wantRunning(id, op)
	case "stop":
		if got := in.settle(id, "stop"); got.State != "stopped" {
			t.Fatalf("after the node-manager's crash: %+v, want stopped\n%s", got, in.logs())
		}
		in.mustDo("POST", "/v1/sandboxes/"+id+"/start", "")
		nb.wantRunning(id, "start after the crashed stop")
	case "fork":
		nb.wantRunning(id, "the fork's parent")
		var list struct{ Sandboxes []sandbox }
		in.do("GET", "/v1/sandboxes", nil, &list)
		for _, child := range list.Sandboxes {
			if child.ID == id {
				continue
			}
			ids = append(ids, child.ID)
			nb.wantRunning(child.ID, "fork child")
		}
	case "pause":
		if got := in.settle(id, "pause"); got.State != "paused" {
			t.Fatalf("after the node-manager's crash: %+v, want paused\n%s", got, in.logs())
		}
		in.mustDo("POST", "/v1/sandboxes/"+id+"/resume", "")
		nb.wantRunning(id, "resume after the crashed pause")
	case "delete":
		in.waitGone(id)
	case "template":
		ids = []string{nb.wantTemplate(template)}
	}
	// The next operation works: a new sandbox on node-b serves.
	next := in.createWith("minimal", "ns")
	ids = append(ids, next.ID)
	if next.Node != "node-b" {
		t.Errorf("the sandbox created after the crash runs on %q, want node-b", next.Node)
	}
	if res := in.exec(next.ID, "echo", "next"); res.Stdout != "next\n" {
		t.Errorf("exec in the sandbox created after the crash: %+v", res)
	}
	return ids, template
}

// wantCreated repeats the create the crash cut with its Idempotency-Key
// until it answers its one sandbox running on node-b, and returns it.
func (nb *armedNodeB) wantCreated(idem, createBody string) string {
	t, in := nb.t, nb.in
	t.Helper()
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
			t.Fatalf("create repeated after the node-manager's crash: HTTP %d %+v\n%s", code, sb, in.logs())
		}
		time.Sleep(time.Second)
	}
	if sb.Node != "node-b" {
		t.Fatalf("the created sandbox runs on %q, want node-b", sb.Node)
	}
	in.exec(sb.ID, "sh", "-c", "echo acknowledged > "+ackFile)
	in.wantAck(sb.ID, "after the create")
	if inv := inventory(nb.dirB, sb.ID); !inventorySees(inv, "subvolume", "cgroup") {
		t.Fatalf("the inventory of a running sandbox misses a kind:\n%s", strings.Join(inv, "\n"))
	}
	nb.wantOneExecution(sb.ID)
	return sb.ID
}

// wantTemplate waits until the build of template the crash cut is ready:
// the server builds it again once the node-manager answers (the node-
// manager clears what the cut build left), it is not failed. A sandbox of
// it is created on node-b and returned.
func (nb *armedNodeB) wantTemplate(template string) string {
	t, in := nb.t, nb.in
	t.Helper()
	state := func() (string, string) {
		var list struct {
			Templates []struct{ Name, State, Reason string } `json:"templates"`
		}
		in.do("GET", "/v1/templates", nil, &list)
		for _, tp := range list.Templates {
			if tp.Name == template {
				return tp.State, tp.Reason
			}
		}
		return "", ""
	}
	for deadline := time.Now().Add(3 * time.Minute); ; {
		st, reason := state()
		if st == "ready" {
			break
		}
		if st == "failed" || time.Now().After(deadline) {
			t.Fatalf("template %s after the node-manager's crash: %q %s, want ready\n%s", template, st, reason, in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	sb := in.createWith(template, "ns")
	if sb.Node != "node-b" {
		t.Fatalf("the sandbox of template %s runs on %q, want node-b", template, sb.Node)
	}
	in.exec(sb.ID, "sh", "-c", "echo acknowledged > "+ackFile)
	in.wantAck(sb.ID, "a sandbox of the template built after the crash")
	return sb.ID
}

// wantRunning is instance.wantRunning on node-b: the sandbox settles
// running there, keeps what it acknowledged and has one execution of its
// current generation on node-b's host.
func (nb *armedNodeB) wantRunning(id, what string) {
	t, in := nb.t, nb.in
	t.Helper()
	if got := in.settle(id, what); got.State != "running" || got.Node != "node-b" {
		t.Fatalf("%s: after the node-manager's crash the sandbox is %+v, want running on node-b\n%s", what, got, in.logs())
	}
	in.wantAck(id, what)
	nb.wantOneExecution(id)
}

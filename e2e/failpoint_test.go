package e2e

import (
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/objstore/s3store/s3test"
)

// TestFailpoints kills the server (control plane and node in one process)
// at every failpoint of internal/failpoint's registry — each named step of
// create, snapshot, hibernate, restore, fork and delete, not a sample —
// by arming the point in a server's environment and running the
// operation; it sees the process die there (status 137, the point named),
// restarts the server on the same data, and checks that nothing
// acknowledged is lost, that the sandbox converges to a legal state of the
// operation (the previous generation authoritative until the new one is
// verified: a hibernation completes and restores the data written before
// it), that after deleting everything the object store holds no object
// (the orphans of a crash between Put and commit are collected), and that
// the host holds nothing of the platform it did not hold before
// (processes, mounts, loop devices, netns, cgroups).
func TestFailpoints(t *testing.T) {
	dir := newDataDir(t)
	before := inventory(dir)
	for _, p := range failpoint.All() {
		if p.Process == failpoint.Bridge || p.Process == failpoint.Guest {
			continue // TestBridgeAndGuestFailpoints: the server lives on
		}
		if p.Op == "template" {
			continue // TestNodeManagerFailpoints: a build on a node of its own
		}
		arm := []string{p.Name + "=exit"}
		if p == failpoint.HibernateAfterPart {
			// An ns snapshot has n = 2 artifacts (the template's base
			// tree, the delta): after the first, and after both but
			// before the node answers.
			arm = []string{p.Name + "=exit@1", p.Name + "=exit@2"}
		}
		for _, spec := range arm {
			t.Run(strings.TrimSuffix(strings.Replace(spec, "=exit", "", 1), "@1"), func(t *testing.T) {
				ids := crashAtFailpoint(t, dir, p, spec, "ns", fileStore)
				checkInventory(t, before, dir, ids...)
			})
		}
	}
	// The points of the operations that write and read the object store
	// once more against a real S3 server (versitygw): its multipart
	// uploads, listings and deletes are not the file store's.
	s3 := s3Store(t)
	for _, p := range failpoint.All() {
		if p.Op != "hibernate" && p.Op != "restore" {
			continue
		}
		spec := p.Name + "=exit"
		if p == failpoint.HibernateAfterPart {
			spec += "@1"
		}
		t.Run("s3/"+p.Name, func(t *testing.T) {
			ids := crashAtFailpoint(t, dir, p, spec, "ns", s3)
			checkInventory(t, before, dir, ids...)
		})
	}
}

// vmFailpointsDefault are the vm runs of make test, the steps whose crash
// handling differs from ns: a full snapshot's artifacts (memory and
// device state as well as the disk, more of them than ns's two) stored in
// part, and a restore that rebuilds a full snapshot from object storage
// and boots it. SPACE_TEST_FAILPOINTS_VM=1 runs every hibernate and
// restore point on vm.
var vmFailpointsDefault = []string{
	failpoint.HibernateAfterPart.Name + "=exit@3",
	failpoint.RestoreAfterDownload.Name + "=exit",
}

// TestFailpointsVM is TestFailpoints' hibernate and restore runs on the vm
// runtime (a full snapshot: memory too), beside the other tests: by
// default the steps of vmFailpointsDefault, with SPACE_TEST_FAILPOINTS_VM=1
// every hibernate and restore point (minutes under TCG).
func TestFailpointsVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("vm failpoints: QEMU is not installed (make test installs qemu-system-x86)")
	}
	t.Parallel()
	dir := newDataDir(t)
	before := inventory(dir)
	var specs []string
	if os.Getenv("SPACE_TEST_FAILPOINTS_VM") == "" {
		specs = vmFailpointsDefault
	} else {
		for _, p := range failpoint.All() {
			if p.Op != "hibernate" && p.Op != "restore" {
				continue
			}
			if p == failpoint.HibernateAfterPart {
				// A vm full snapshot has more artifacts than an ns one
				// (6 or more: each of @1 … @6 is reached): after the
				// first three.
				specs = append(specs, p.Name+"=exit@1", p.Name+"=exit@2", p.Name+"=exit@3")
				continue
			}
			specs = append(specs, p.Name+"=exit")
		}
	}
	for _, spec := range specs {
		name, _, _ := strings.Cut(spec, "=")
		p, ok := failpoint.Lookup(name)
		if !ok {
			t.Fatalf("vm failpoint %q is not in the registry", name)
		}
		t.Run(strings.TrimSuffix(strings.Replace(spec, "=exit", "", 1), "@1"), func(t *testing.T) {
			ids := crashAtFailpoint(t, dir, p, spec, "vm", fileStore)
			checkInventory(t, before, dir, ids...)
		})
	}
}

// ackFile is what a sandbox was told to write, and answered, before the
// crash: it must survive everything.
const ackFile = "/home/user/ack"

// crashAtFailpoint runs p's operation on a sandbox of runtime on a server
// armed with spec (p's entry of SPACE_FAILPOINTS), sees it die at p,
// restarts, checks the outcome, deletes what the run made and stops the
// server. It returns the sandboxes the run made.
func crashAtFailpoint(t *testing.T, dir string, p *failpoint.Point, spec, runtime string, store failpointStore) []string {
	in := launchServer(t, dir, append([]string{failpoint.EnvVar + "=" + spec}, store.env...), store.flags...)
	in.waitTemplate("minimal")
	var id string
	if p.Op != "create" {
		id = in.createWith("minimal", runtime).ID
		in.exec(id, "sh", "-c", "echo acknowledged > "+ackFile)
	}
	// The state the operation starts from.
	if prep, ok := map[string]string{"restore": "hibernate", "resume": "pause"}[p.Op]; ok {
		in.mustDo("POST", "/v1/sandboxes/"+id+"/"+prep, "")
		if got := in.settle(id, prep); got.State != prep+"d" {
			t.Fatalf("%s before the %s: %+v", prep, p.Op, got)
		}
	}
	idem := "failpoint-" + strings.ReplaceAll(p.Name, "/", "-")
	createBody := `{"template":"minimal","runtime":"` + runtime + `","memory_mib":256}`
	switch p.Op {
	case "create":
		in.send("POST", "/v1/sandboxes", createBody, idem)
	case "snapshot":
		in.send("POST", "/v1/sandboxes/"+id+"/snapshots", `{"kind":"disk"}`, "")
	case "hibernate", "restore", "fork", "stop", "pause", "resume":
		in.send("POST", "/v1/sandboxes/"+id+"/"+p.Op, "", "")
	case "delete":
		in.send("DELETE", "/v1/sandboxes/"+id, "", "")
	default:
		t.Fatalf("failpoint %s: this test does not know how to drive operation %q; add it", p.Name, p.Op)
	}
	in.waitFailpoint(p)
	crashed := in
	// A node-manager whose server crashed exits on its own (its
	// parent-death signal), within its bound; one that had to be cut off
	// wrote what held it up.
	defer func() {
		if logs := crashed.logs(); strings.Contains(logs, "still not exited") {
			t.Errorf("the crashed server's node-manager did not exit in time:\n%s", logs[strings.Index(logs, "space-node-manager: still not exited"):])
		}
	}()

	in = startServerEnv(t, dir, store.env, store.flags...)
	ids := []string{id}
	switch p.Op {
	case "create":
		var sb struct {
			sandbox
			Message string `json:"message"`
		}
		if code := in.doIdem(idem, "POST", "/v1/sandboxes", []byte(createBody), &sb); code != http.StatusCreated || sb.State != "running" {
			t.Fatalf("create repeated after the crash: HTTP %d %+v\n%s", code, sb, in.logs())
		}
		ids = []string{sb.ID}
		in.exec(sb.ID, "sh", "-c", "echo acknowledged > "+ackFile)
		in.wantAck(sb.ID, "after the create")
		// The inventory sees what a sandbox holds (else its emptiness
		// at the end would prove nothing).
		if inv := inventory(dir, sb.ID); !inventorySees(inv, "subvolume", "cgroup") {
			t.Fatalf("the inventory of a running sandbox misses a kind:\n%s", strings.Join(inv, "\n"))
		}
	case "snapshot":
		in.wantRunning(id, "snapshot")
		snaps := in.settleSnapshots(id)
		for _, s := range snaps {
			if s.State == "failed" && s.Reason == "" {
				t.Errorf("snapshot %s failed without a reason", s.ID)
			}
			if s.State == "ready" && s.Kind == "disk" && s.Tier == "manual" {
				// The crash lost the answer, not the snapshot: it restores.
				in.mustDo("POST", "/v1/sandboxes/"+id+"/rollback", `{"snapshot":"`+s.ID+`"}`)
				in.wantRunning(id, "rollback to the snapshot")
			}
		}
	case "hibernate":
		// Every step is re-driven: the hibernation completes, and the
		// restore brings back what was acknowledged before it.
		if got := in.settle(id, "hibernate"); got.State != "hibernated" {
			t.Fatalf("after the crash: %+v, want hibernated\n%s", got, in.logs())
		}
		in.mustDo("POST", "/v1/sandboxes/"+id+"/restore", "")
		in.wantRunning(id, "restore after the crashed hibernation")
	case "restore", "resume":
		in.wantRunning(id, p.Op)
	case "stop", "pause":
		// The operation completes; the sandbox comes back with its data.
		want, back := "stopped", "start"
		if p.Op == "pause" {
			want, back = "paused", "resume"
		}
		if got := in.settle(id, p.Op); got.State != want {
			t.Fatalf("after the crash: %+v, want %s\n%s", got, want, in.logs())
		}
		in.mustDo("POST", "/v1/sandboxes/"+id+"/"+back, "")
		in.wantRunning(id, back+" after the crashed "+p.Op)
	case "fork":
		in.wantRunning(id, "fork's parent")
		var list struct{ Sandboxes []sandbox }
		in.do("GET", "/v1/sandboxes", nil, &list)
		for _, child := range list.Sandboxes {
			if child.ID == id {
				continue
			}
			ids = append(ids, child.ID)
			got := in.settle(child.ID, "fork child")
			if got.State != "running" {
				t.Errorf("fork child %s after the crash: %+v, want running", child.ID, got)
				continue
			}
			in.wantAck(child.ID, "fork child")
		}
		if p == failpoint.ForkAfterRecord && len(ids) != 2 {
			t.Errorf("the child recorded before the crash is gone: sandboxes %+v", list.Sandboxes)
		}
	case "delete":
		in.waitGone(id)
	}
	for _, id := range ids {
		if id != "" {
			in.do("DELETE", "/v1/sandboxes/"+id, nil, nil)
			in.waitGone(id)
		}
	}
	in.waitNoObjects(store)
	in.waitNoVolumes(ids)
	in.stop()
	return ids
}

// send sends a request the server is expected to die under; its answer
// (if any) is ignored.
func (in *instance) send(method, path, body, idemKey string) {
	req, err := http.NewRequest(method, in.url+path, strings.NewReader(body))
	if err != nil {
		in.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+in.key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
}

// waitFailpoint waits until the process p names dies at p. A server
// point: the server exits with status 137, the point's line in its log. A
// node-manager point: the line in the log (the node-manager writes to the
// server's stderr) and the node-manager gone (or already started again,
// unarmed, by the server: nodeManagerRestarted); the server is then killed too,
// and the node-manager with it.
func (in *instance) waitFailpoint(p *failpoint.Point) {
	in.t.Helper()
	line := "failpoint " + p.Name + ": exit"
	deadline := time.After(3 * time.Minute)
	if p.Process == failpoint.NodeManager {
		for !strings.Contains(in.logs(), line) || nodeManagerRunning(in.dataDir) && !nodeManagerRestarted(in.logs(), line) {
			select {
			case <-in.exited:
				in.t.Fatalf("failpoint %s armed: the server exited before the node-manager died at the point\n%s", p.Name, in.logs())
			case <-deadline:
				in.kill()
				in.t.Fatalf("failpoint %s armed: the node-manager did not die at it within 3m\n%s", p.Name, in.logs())
			case <-time.After(50 * time.Millisecond):
			}
		}
		in.kill()
		return
	}
	select {
	case <-in.exited:
	case <-deadline:
		in.kill()
		in.t.Fatalf("failpoint %s armed: the server did not die within 3m\n%s", p.Name, in.logs())
	}
	if code := in.cmd.ProcessState.ExitCode(); code != failpoint.ExitCode || !strings.Contains(in.logs(), line) {
		in.t.Fatalf("failpoint %s armed: the server exited with %d, want %d at the point\n%s", p.Name, code, failpoint.ExitCode, in.logs())
	}
}

// nodeManagerRestarted reports whether a --dev server's logs say it
// started its node-manager again after line, the failpoint's exit.
func nodeManagerRestarted(logs, line string) bool {
	i := strings.Index(logs, line)
	return i >= 0 && strings.Contains(logs[i:], nodeManagerRestartLine)
}

// nodeManagerRestartLine is what a --dev server logs when its
// node-manager exited and it starts it again.
const nodeManagerRestartLine = "the node-manager exited; starting it again"

// nodeManagerRunning reports whether a node-manager of dataDir runs.
func nodeManagerRunning(dataDir string) bool {
	for _, s := range inventory(dataDir) {
		if strings.HasPrefix(s, "process ") && strings.Contains(s, "space-node-manager --data-dir "+dataDir+" ") {
			return true
		}
	}
	return false
}

// mustDo sends a request that must be accepted. A 503 is retried for a
// while: a restarted node offers vm only once its runtime is set up again.
func (in *instance) mustDo(method, path, body string) {
	in.t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; {
		var e struct{ Message string }
		code := in.do(method, path, jsonBody(body), &e)
		if code < 300 {
			return
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			in.t.Fatalf("%s %s: HTTP %d %s\n%s", method, path, code, e.Message, in.logs())
		}
		time.Sleep(time.Second)
	}
}

// wantRunning waits until sandbox id settles, wants it running and its
// acknowledged data there.
func (in *instance) wantRunning(id, what string) {
	in.t.Helper()
	if got := in.settle(id, what); got.State != "running" {
		in.t.Fatalf("%s: after the crash the sandbox is %+v, want running\n%s", what, got, in.logs())
	}
	in.wantAck(id, what)
	in.wantOneExecution(id, what)
}

// wantOneExecution checks the host against what the control plane says of
// running sandbox id: the subvolumes and cgroups named after it belong to
// one execution (no earlier one left by the crash), of its current
// generation.
func (in *instance) wantOneExecution(id, what string) {
	in.t.Helper()
	in.wantOneExecutionIn(in.dataDir, id, what)
}

// wantOneExecutionIn is wantOneExecution on the host of the node whose
// data directory is dataDir.
func (in *instance) wantOneExecutionIn(dataDir, id, what string) {
	in.t.Helper()
	var sb sandbox
	in.do("GET", "/v1/sandboxes/"+id, nil, &sb)
	gen := fmt.Sprintf("%s-g%d-", id, sb.Generation)
	var execs, seen []string
	for deadline := time.Now().Add(15 * time.Second); ; {
		execs, seen = nil, nil
		for _, s := range inventory(dataDir, id) {
			kind, path, _ := strings.Cut(s, " ")
			// An ns execution's own cpu group is named space.<execution>.
			name := strings.TrimPrefix(filepath.Base(path), "space.")
			if (kind == "cgroup" || kind == "subvolume" && strings.Contains(path, "/volumes/volumes/")) && !slices.Contains(execs, name) {
				execs = append(execs, name)
			}
			seen = append(seen, s)
		}
		if len(execs) == 1 && strings.HasPrefix(execs[0], gen) {
			return
		}
		if sb.Runtime == "vm" && len(execs) == 0 {
			return // its disk is an image, its cgroup the VMM's: not named here
		}
		if time.Now().After(deadline) {
			in.t.Errorf("%s: sandbox %s (generation %d) holds on the host the executions %v, want one of its generation:\n%s", what, id, sb.Generation, execs, strings.Join(seen, "\n"))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// wantAck checks that sandbox id still has what it acknowledged.
func (in *instance) wantAck(id, what string) {
	in.t.Helper()
	if res := in.exec(id, "cat", ackFile); res.Stdout != "acknowledged\n" {
		in.t.Errorf("%s: the acknowledged data: %+v, want it kept", what, res)
	}
}

// settleSnapshots waits until no snapshot of sandbox id is being taken
// and returns them.
func (in *instance) settleSnapshots(id string) []snapshotJSON {
	in.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		var list struct{ Snapshots []snapshotJSON }
		in.do("GET", "/v1/sandboxes/"+id+"/snapshots", nil, &list)
		if !slices.ContainsFunc(list.Snapshots, func(s snapshotJSON) bool { return s.State == "creating" }) {
			return list.Snapshots
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("snapshots of %s still being taken: %+v\n%s", id, list.Snapshots, in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitGone waits until sandbox id is deleted, repeating a delete the
// crash may have lost (only when the sandbox is not already deleting).
func (in *instance) waitGone(id string) {
	in.t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; {
		var got sandbox
		if code := in.do("GET", "/v1/sandboxes/"+id, nil, &got); code == http.StatusNotFound {
			return
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("sandbox %s not deleted: %+v\n%s", id, got, in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// failpointStore is the object store of a failpoint run's servers: the
// flags and environment that name it, and what it holds.
type failpointStore struct {
	flags, env []string
	keys       func(in *instance) []string
}

// fileStore is the dev server's own file:// store in its data directory.
var fileStore = failpointStore{keys: func(in *instance) []string { return storedObjects(filepath.Join(in.dataDir, "objects")) }}

// s3Store starts a real S3 server (versitygw) for the test and names a
// prefix of its bucket as the servers' object store.
func s3Store(t *testing.T) failpointStore {
	t.Helper()
	srv := s3test.Start(t)
	const prefix = "failpoints"
	return failpointStore{
		flags: []string{"--object-store", "s3://" + srv.Bucket + "/" + prefix + "?endpoint=" + srv.Endpoint + "&insecure=1"},
		env:   []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey},
		keys: func(in *instance) []string {
			c, err := srv.Client()
			if err != nil {
				in.t.Fatal(err)
			}
			var keys []string
			for o := range c.ListObjects(in.t.Context(), srv.Bucket, minio.ListObjectsOptions{Prefix: prefix + "/", Recursive: true}) {
				if o.Err != nil {
					in.t.Fatalf("list the S3 store: %v", o.Err)
				}
				keys = append(keys, o.Key)
			}
			// An upload that was begun and never completed holds parts
			// no listing of objects shows.
			for u := range c.ListIncompleteUploads(in.t.Context(), srv.Bucket, prefix+"/", true) {
				if u.Err != nil {
					in.t.Fatalf("list the S3 store's incomplete uploads: %v", u.Err)
				}
				keys = append(keys, "incomplete upload of "+u.Key)
			}
			return keys
		},
	}
}

// waitNoObjects waits until the object store holds no object: everything
// of the run is deleted, so whatever stays is an orphan no row will ever
// delete.
func (in *instance) waitNoObjects(store failpointStore) {
	in.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		objs := store.keys(in)
		if len(objs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			in.t.Errorf("every sandbox is deleted and the object store still holds:\n%s", strings.Join(objs, "\n"))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitNoVolumes waits until the volume store holds no subvolume of the
// sandboxes ids and no node snapshot at all (checked while the server
// runs: on a loopback image the store is not mounted once it stops).
func (in *instance) waitNoVolumes(ids []string) {
	in.t.Helper()
	in.waitNoVolumesIn(in.dataDir, ids)
}

// waitNoVolumesIn is waitNoVolumes on the node whose data directory is
// dataDir.
func (in *instance) waitNoVolumesIn(dataDir string, ids []string) {
	in.t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; {
		var left []string
		for _, s := range inventory(dataDir, ids...) {
			if strings.HasPrefix(s, "subvolume ") {
				left = append(left, s)
			}
		}
		// Every sandbox is gone, so every node snapshot (a manual
		// snapshot's id does not name its sandbox) must be too; the
		// store's own dot directories (.bases, .import) stay.
		for _, dir := range []string{"snapshots", "node-snapshots"} {
			snaps, _ := filepath.Glob(filepath.Join(dataDir, "volumes", dir, "*"))
			for _, p := range snaps {
				if !strings.HasPrefix(filepath.Base(p), ".") {
					left = append(left, "snapshot "+p)
				}
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			in.t.Errorf("every sandbox is deleted and the volume store still holds:\n%s", strings.Join(left, "\n"))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// storedObjects lists the keys of the objects in a file:// object store
// (internal/objstore/filestore: an object is a file named KEY@; .tmp holds
// Puts in progress).
func storedObjects(root string) []string {
	var keys []string
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == ".tmp" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "@") {
			rel, _ := filepath.Rel(root, path)
			keys = append(keys, strings.TrimSuffix(rel, "@"))
		}
		return nil
	})
	return keys
}

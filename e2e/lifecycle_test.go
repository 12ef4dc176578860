package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

type snapshotJSON struct {
	ID      string `json:"id"`
	Sandbox string `json:"sandbox"`
	Kind    string `json:"kind"`
	Tier    string `json:"tier"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// TestSnapshotsRollbackForkStopStart: on the ns runtime, a disk snapshot
// keeps the filesystem as it was; rollback undoes a destructive rm -rf with a
// new execution; a fork is an independent sandbox; stop keeps the disk and
// start boots from it; deleting the sandbox removes its snapshots.
func TestSnapshotsRollbackForkStopStart(t *testing.T) {
	lifecycleScenario(t, "ns")
}

// TestVMLifecycle runs the same scenario on the vm runtime, where a fork
// starts from a full snapshot and continues the parent's processes.
func TestVMLifecycle(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
	lifecycleScenario(t, "vm")
}

func lifecycleScenario(t *testing.T, runtime string, extraFlags ...string) {
	dataDir := newDataDir(t)
	in := startServerWith(t, dataDir, extraFlags...)
	defer in.stop()
	if len(extraFlags) > 0 { // a warm pool: the sandbox must claim from it
		in.waitWarm("minimal", runtime, 1)
	}
	sb := in.createWith("minimal", runtime)
	if len(extraFlags) > 0 && !in.wasWarm(sb.ID) {
		t.Fatalf("sandbox did not claim a prepared execution\n%s", in.logs())
	}
	deleted := false
	defer func() {
		if !deleted {
			in.delete(sb.ID)
		}
	}()
	in.exec(sb.ID, "sh", "-c", "mkdir -p /home/user/work && echo precious > /home/user/work/a && echo v1 > /home/user/work/version")

	// A disk snapshot, through the CLI.
	snapID, e, c := in.cli("", "snapshot", "create", sb.ID)
	snapID = strings.TrimSpace(snapID)
	if c != 0 || !strings.HasPrefix(snapID, "sn-") {
		t.Fatalf("snapshot create: exit %d %q %s\n%s", c, snapID, e, in.logs())
	}
	// A snapshot request retried with its Idempotency-Key is taken once.
	var s1, s2 snapshotJSON
	for _, s := range []*snapshotJSON{&s1, &s2} {
		req, _ := http.NewRequest("POST", in.url+"/v1/sandboxes/"+sb.ID+"/snapshots", strings.NewReader(`{"kind":"disk"}`))
		req.Header.Set("Authorization", "Bearer "+in.key)
		req.Header.Set("Idempotency-Key", "snap-once-"+sb.ID)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(s)
		resp.Body.Close()
	}
	if s1.ID == "" || s1.ID != s2.ID {
		t.Errorf("snapshot retried with one Idempotency-Key: %q then %q, want one snapshot", s1.ID, s2.ID)
	}
	// A snapshot can be deleted: gone from the list and from the node.
	if _, e, c := in.cli("", "snapshot", "delete", sb.ID, s1.ID); c != 0 {
		t.Errorf("snapshot delete: %d %s", c, e)
	}
	if out, _, _ := in.cli("", "snapshot", "list", sb.ID); strings.Contains(out, s1.ID) {
		t.Errorf("deleted snapshot still listed:\n%s", out)
	}
	for _, left := range listNodeSnapshots(t, dataDir) {
		if strings.Contains(left, s1.ID) {
			t.Errorf("deleted snapshot still on the node: %s", left)
		}
	}
	var de struct{ Code, Message string }
	if code := in.do("DELETE", "/v1/sandboxes/"+sb.ID+"/snapshots/"+s1.ID, nil, &de); code != http.StatusNotFound {
		t.Errorf("deleting it again: HTTP %d %+v, want 404", code, de)
	}
	out, e, c := in.cli("", "snapshot", "list", sb.ID)
	if c != 0 || !strings.Contains(out, snapID) || !strings.Contains(out, "ready") || !strings.Contains(out, "disk") {
		t.Errorf("snapshot list: exit %d %q %s", c, out, e)
	}
	if runtime == "ns" {
		var bad snapshotJSON
		if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", map[string]any{"kind": "full"}, &bad); code != http.StatusConflict || !strings.Contains(bad.Message, "memory") {
			t.Errorf("full snapshot on ns: HTTP %d %+v, want 409 explaining the runtime cannot save memory", code, bad)
		}
	}
	var bad snapshotJSON
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", map[string]any{"kind": "memory"}, &bad); code != http.StatusBadRequest {
		t.Errorf("snapshot kind memory: HTTP %d %+v, want 400", code, bad)
	}

	// Destroy the work, then roll back. A stream open on the replaced
	// execution is cut when the new one is installed.
	in.exec(sb.ID, "sh", "-c", "rm -rf /home/user/work && echo after > /home/user/late")
	stream := exec.Command(bin.space, "exec", sb.ID, "--", "sh", "-c", "while :; do echo tick; sleep 0.2; done")
	stream.Env = append(os.Environ(), "SPACE_API_URL="+in.url, "SPACE_API_KEY="+in.key)
	streamOut, _ := stream.StdoutPipe()
	if err := stream.Start(); err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 5)
	if _, err := io.ReadFull(streamOut, first); err != nil || string(first) != "tick\n" {
		t.Fatalf("stream before rollback: %q %v", first, err)
	}
	streamDone := make(chan error, 1)
	go func() { io.Copy(io.Discard, streamOut); streamDone <- stream.Wait() }()
	if out, e, c := in.cli("", "sandbox", "rollback", sb.ID, "--snapshot", snapID); c != 0 {
		t.Fatalf("rollback: exit %d %s %s\n%s", c, out, e, in.logs())
	}
	select {
	case err := <-streamDone:
		if err == nil {
			t.Errorf("the stream on the replaced execution ended with success, want an error")
		}
	case <-time.After(15 * time.Second):
		stream.Process.Kill()
		t.Errorf("a stream on the replaced execution still runs 15 s after the rollback")
	}
	var got sandbox
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
	if got.State != "running" || got.Generation != sb.Generation+1 {
		t.Errorf("after rollback: %+v, want running at generation %d", got, sb.Generation+1)
	}
	if res := in.exec(sb.ID, "cat", "/home/user/work/a"); strings.TrimSpace(res.Stdout) != "precious" {
		t.Errorf("after rollback: work/a = %q (%s), want precious", res.Stdout, res.Stderr)
	}
	if res := in.exec(sb.ID, "sh", "-c", "test -e /home/user/late && echo present || echo absent"); strings.TrimSpace(res.Stdout) != "absent" {
		t.Errorf("after rollback: a file written after the snapshot is %s", res.Stdout)
	}
	// Rollback to a snapshot that is not the sandbox's is 404, without one 400.
	var eb snapshotJSON
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/rollback", map[string]any{"snapshot": "sn-doesnotexist0000"}, &eb); code != http.StatusNotFound {
		t.Errorf("rollback to an unknown snapshot: HTTP %d %+v", code, eb)
	}
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/rollback", map[string]any{}, &eb); code != http.StatusBadRequest {
		t.Errorf("rollback without a snapshot: HTTP %d %+v", code, eb)
	}

	// A fork (of the current state) is independent of its parent.
	in.exec(sb.ID, "sh", "-c", "echo v2 > /home/user/work/version")
	forkID, e, c := in.cli("", "sandbox", "fork", sb.ID)
	forkID = strings.TrimSpace(forkID)
	if c != 0 || forkID == "" || forkID == sb.ID {
		t.Fatalf("fork: exit %d %q %s\n%s", c, forkID, e, in.logs())
	}
	if res := in.exec(forkID, "cat", "/home/user/work/version"); strings.TrimSpace(res.Stdout) != "v2" {
		t.Errorf("fork sees version %q, want v2 (the parent's state at the fork)", res.Stdout)
	}
	in.exec(forkID, "sh", "-c", "echo fork > /home/user/work/version")
	if res := in.exec(sb.ID, "cat", "/home/user/work/version"); strings.TrimSpace(res.Stdout) != "v2" {
		t.Errorf("parent sees %q after the fork wrote: not independent", res.Stdout)
	}
	if res := in.exec(forkID, "hostname"); strings.TrimSpace(res.Stdout) != forkID {
		t.Errorf("fork hostname = %q, want its own id %s", res.Stdout, forkID)
	}
	in.delete(forkID)

	// Stop keeps the disk; start boots a new execution from it.
	if _, e, c := in.cli("", "sandbox", "stop", sb.ID); c != 0 {
		t.Fatalf("stop: %d %s\n%s", c, e, in.logs())
	}
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
	if got.State != "stopped" {
		t.Fatalf("after stop: %+v", got)
	}
	var ee struct{ Code, Message string }
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"true"}}, &ee); code != http.StatusConflict {
		t.Errorf("exec on a stopped sandbox: HTTP %d %+v, want 409", code, ee)
	}
	if _, e, c := in.cli("", "sandbox", "start", sb.ID); c != 0 {
		t.Fatalf("start: %d %s\n%s", c, e, in.logs())
	}
	if res := in.exec(sb.ID, "cat", "/home/user/work/version"); strings.TrimSpace(res.Stdout) != "v2" {
		t.Errorf("after stop/start: version = %q, want v2", res.Stdout)
	}
	// The disk the sandbox started from cannot be deleted under it.
	var snaps struct{ Snapshots []snapshotJSON }
	in.do("GET", "/v1/sandboxes/"+sb.ID+"/snapshots", nil, &snaps)
	stops := 0
	for _, sn := range snaps.Snapshots {
		if sn.Tier == "stop" && sn.State == "ready" {
			stops++
			var de struct{ Code, Message string }
			if code := in.do("DELETE", "/v1/sandboxes/"+sb.ID+"/snapshots/"+sn.ID, nil, &de); code != http.StatusConflict {
				t.Errorf("deleting the snapshot the sandbox started from: HTTP %d %+v, want 409", code, de)
			}
		}
	}
	if stops != 1 {
		t.Errorf("%d ready stop snapshots after one stop, want 1: %+v", stops, snaps.Snapshots)
	}
	// A stop of a paused sandbox keeps what it wrote just before the pause
	// (on vm, still in the frozen guest's page cache then).
	in.exec(sb.ID, "sh", "-c", "echo before-pause > /home/user/work/paused")
	in.mustDo("POST", "/v1/sandboxes/"+sb.ID+"/pause", "")
	if got := in.settle(sb.ID, "pause"); got.State != "paused" {
		t.Fatalf("pause before the stop: %+v", got)
	}
	if _, e, c := in.cli("", "sandbox", "stop", sb.ID); c != 0 {
		t.Fatalf("stop of a paused sandbox: %d %s\n%s", c, e, in.logs())
	}
	if _, e, c := in.cli("", "sandbox", "start", sb.ID); c != 0 {
		t.Fatalf("start after the paused stop: %d %s\n%s", c, e, in.logs())
	}
	if res := in.exec(sb.ID, "cat", "/home/user/work/paused"); res.Stdout != "before-pause\n" {
		t.Errorf("stop of a paused sandbox lost what it wrote before the pause: %+v", res)
	}
	if out, _, c := in.cli("", "sandbox", "events", sb.ID); c != 0 || !strings.Contains(out, "rollback requested") || !strings.Contains(out, "stopped; disk kept") {
		t.Errorf("sandbox events: exit %d\n%s", c, out)
	}

	// Crash recovery: the execution is killed; the sandbox comes back from
	// its latest snapshot as a new execution. From a full snapshot (vm) the
	// processes continue; from a disk snapshot (ns) the files are back.
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
	kind := "disk"
	if runtime == "vm" {
		kind = "full"
	}
	in.exec(sb.ID, "sh", "-c", "echo kept > /home/user/kept; (i=0; while :; do i=$((i+1)); echo $i > /home/user/counter; sleep 0.2; done) >/dev/null 2>&1 &")
	time.Sleep(time.Second)
	var snap snapshotJSON
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", map[string]any{"kind": kind}, &snap); code != http.StatusCreated {
		t.Fatalf("%s snapshot: HTTP %d %+v", kind, code, snap)
	}
	// Written after the snapshot: an ns sandbox's disk outlives its
	// processes, so its recovery starts from the disk as it died and keeps
	// this too; a vm's recovery starts from the full snapshot, without it.
	in.exec(sb.ID, "sh", "-c", "echo late > /home/user/after-snapshot")
	pid := sandboxPid(t, dataDir, sb.ID)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the sandbox's execution (pid %d): %v", pid, err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var cur sandbox
		in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &cur)
		if cur.State == "running" && cur.Generation == got.Generation+1 {
			break
		}
		if cur.State == "failed" || time.Now().After(deadline) {
			t.Fatalf("after the execution was killed: %+v, want running at generation %d\n%s", cur, got.Generation+1, in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if res := in.exec(sb.ID, "cat", "/home/user/kept"); strings.TrimSpace(res.Stdout) != "kept" {
		t.Errorf("after recovery: kept = %q", res.Stdout)
	}
	late := strings.TrimSpace(in.exec(sb.ID, "sh", "-c", "cat /home/user/after-snapshot 2>/dev/null || echo absent").Stdout)
	if want := map[string]string{"ns": "late", "vm": "absent"}[runtime]; late != want {
		t.Errorf("after recovery: the file written after the snapshot is %q, want %q (ns recovers from its own disk, vm from its full snapshot)", late, want)
	}
	if runtime == "vm" {
		first := in.exec(sb.ID, "cat", "/home/user/counter").Stdout
		time.Sleep(time.Second)
		if again := in.exec(sb.ID, "cat", "/home/user/counter").Stdout; again == first {
			t.Errorf("after recovery from a full snapshot the counter stays at %q: the process did not come back", first)
		}
	}
	if out, _, _ := in.cli("", "sandbox", "events", sb.ID); !strings.Contains(out, "recovering") {
		t.Errorf("no recovering event:\n%s", out)
	}

	// Hibernate: the sandbox leaves its node for object storage (encrypted)
	// and comes back with restore; from a full snapshot (vm) its processes
	// continue.
	in.exec(sb.ID, "sh", "-c", "echo 'marker-4c1d0a hibernated text' > /home/user/hib")
	if out, e, c := in.cli("", "sandbox", "hibernate", sb.ID); c != 0 {
		t.Fatalf("hibernate: exit %d %s %s\n%s", c, out, e, in.logs())
	}
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
	if got.State != "hibernated" || got.Node != "" {
		t.Fatalf("after hibernate: %+v, want hibernated on no node", got)
	}
	if objs := objectFiles(t, filepath.Join(dataDir, "objects")); len(objs) == 0 {
		t.Errorf("no objects in the object store after hibernate")
	} else if leaked := filesContaining(objs, "marker-4c1d0a"); len(leaked) != 0 {
		t.Errorf("plaintext of the sandbox in the object store: %v", leaked)
	}
	if out, e, c := in.cli("", "sandbox", "restore", sb.ID); c != 0 {
		t.Fatalf("restore: exit %d %s %s\n%s", c, out, e, in.logs())
	}
	if res := in.exec(sb.ID, "cat", "/home/user/hib"); !strings.Contains(res.Stdout, "marker-4c1d0a") {
		t.Errorf("after restore: hib = %q %s", res.Stdout, res.Stderr)
	}
	if runtime == "vm" {
		first := in.exec(sb.ID, "cat", "/home/user/counter").Stdout
		time.Sleep(time.Second)
		if again := in.exec(sb.ID, "cat", "/home/user/counter").Stdout; again == first {
			t.Errorf("after hibernate and restore the counter stays at %q: the process did not come back", first)
		}
	}

	in.delete(sb.ID)
	deleted = true
	if objs := objectFiles(t, filepath.Join(dataDir, "objects")); len(filesUnder(objs, "snapshots")) != 0 {
		t.Errorf("snapshot objects left after the sandbox was deleted: %v", filesUnder(objs, "snapshots"))
	}
	if left := listNodeSnapshots(t, dataDir); len(left) != 0 {
		t.Errorf("snapshots left on the node after the sandbox was deleted: %v", left)
	}
}

// listNodeSnapshots lists what the node keeps of snapshots: node-manager
// snapshot directories and volume snapshots.
func listNodeSnapshots(t *testing.T, dataDir string) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{"volumes/node-snapshots", "volumes/snapshots"} {
		entries, err := os.ReadDir(filepath.Join(dataDir, dir))
		if err != nil && !os.IsNotExist(err) {
			t.Errorf("read %s: %v", dir, err)
		}
		for _, e := range entries {
			switch e.Name() {
			case ".bases", ".boot":
				// Caches shared by snapshots: template base streams and
				// boot files.
			case ".import":
				staged, _ := os.ReadDir(filepath.Join(dataDir, dir, e.Name()))
				for _, s := range staged {
					out = append(out, dir+"/.import/"+s.Name())
				}
			default:
				out = append(out, dir+"/"+e.Name())
			}
		}
	}
	return out
}

// objectFiles lists the files under an object store directory.
func objectFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// filesContaining returns the files whose bytes contain s.
func filesContaining(files []string, s string) []string {
	var out []string
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), s) {
			out = append(out, f)
		}
	}
	return out
}

// filesUnder returns the files with a path element named dir.
func filesUnder(files []string, dir string) []string {
	var out []string
	for _, f := range files {
		if strings.Contains(f, "/"+dir+"/") {
			out = append(out, f)
		}
	}
	return out
}

// TestScheduledSnapshotsAndRetention: with a one-second schedule a running
// sandbox gets disk snapshots on its own, and retention prunes them down to
// the policy (here: one per second for four seconds, at most three).
func TestScheduledSnapshotsAndRetention(t *testing.T) {
	in := startServerWith(t, newDataDir(t), "--snapshot-every", "1s", "--full-snapshot-every", "0", "--snapshot-retention", "1s:4s,max=3")
	defer in.stop()
	sb := in.create("minimal")
	defer in.delete(sb.ID)
	in.exec(sb.ID, "sh", "-c", "echo scheduled > /home/user/s")
	var list struct{ Snapshots []snapshotJSON }
	deadline := time.Now().Add(time.Minute)
	for {
		in.do("GET", "/v1/sandboxes/"+sb.ID+"/snapshots", nil, &list)
		events, _, _ := in.cli("", "sandbox", "events", sb.ID)
		if strings.Contains(events, "pruned by retention") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot pruned after a minute; snapshots %+v\n%s", list.Snapshots, events)
		}
		time.Sleep(500 * time.Millisecond)
	}
	ready := 0
	for _, s := range list.Snapshots {
		if s.Tier != "auto" || s.Kind != "disk" {
			t.Errorf("scheduled snapshot %+v, want tier auto, kind disk", s)
		}
		if s.State == "ready" {
			ready++
		}
	}
	if ready == 0 || ready > 4 {
		t.Errorf("%d ready scheduled snapshots, want 1 to 4 (max=3, plus one taken since): %+v", ready, list.Snapshots)
	}
	// A scheduled snapshot is usable: roll back to the newest.
	newest := list.Snapshots[len(list.Snapshots)-1]
	for i := len(list.Snapshots) - 1; i >= 0 && newest.State != "ready"; i-- {
		newest = list.Snapshots[i]
	}
	in.exec(sb.ID, "rm", "/home/user/s")
	if _, e, c := in.cli("", "sandbox", "rollback", sb.ID, "--snapshot", newest.ID); c != 0 {
		t.Fatalf("rollback to %s: %d %s", newest.ID, c, e)
	}
	if res := in.exec(sb.ID, "cat", "/home/user/s"); res.Stdout != "scheduled\n" {
		t.Errorf("after rollback to a scheduled snapshot: %+v", res)
	}
}

// TestIdleHandlingAndTimeout: a sandbox idle for its idle timeout is paused
// (or hibernated) and the next request resumes it transparently; the
// timeout can be extended and removed.
func TestIdleHandlingAndTimeout(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	for _, action := range []string{"pause", "hibernate"} {
		var sb struct {
			sandbox
			IdleTimeout string `json:"idle_timeout"`
			IdleAction  string `json:"idle_action"`
			Message     string `json:"message"`
		}
		if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256, "idle_timeout": "2s", "idle_action": action}, &sb); code != http.StatusCreated {
			t.Fatalf("create with idle %s: HTTP %d %s", action, code, sb.Message)
		}
		if sb.IdleTimeout != "2s" || sb.IdleAction != action {
			t.Errorf("created %+v, want idle 2s %s", sb, action)
		}
		in.exec(sb.ID, "sh", "-c", "echo awake > /home/user/state")
		want := map[string]string{"pause": "paused", "hibernate": "hibernated"}[action]
		deadline := time.Now().Add(time.Minute)
		var got sandbox
		for {
			in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
			if got.State == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("idle sandbox still %s after a minute, want %s", got.State, want)
			}
			time.Sleep(250 * time.Millisecond)
		}
		// The next request wakes it.
		if res := in.exec(sb.ID, "cat", "/home/user/state"); res.Stdout != "awake\n" {
			t.Errorf("request to the %s sandbox: %+v", want, res)
		}
		in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
		if got.State != "running" {
			t.Errorf("after the waking request: %+v", got)
		}
		if out, _, _ := in.cli("", "sandbox", "events", sb.ID); !strings.Contains(out, "woken from "+want) || !strings.Contains(out, "no request for") {
			t.Errorf("events lack the idle and wake entries:\n%s", out)
		}
		in.delete(sb.ID)
	}

	sb := in.create("minimal")
	defer in.delete(sb.ID)
	var got struct {
		ExpiresAt *time.Time `json:"expires_at"`
		Message   string     `json:"message"`
	}
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/timeout", map[string]any{"timeout": "1h"}, &got); code != http.StatusOK || got.ExpiresAt == nil || time.Until(*got.ExpiresAt) < 59*time.Minute {
		t.Errorf("set timeout 1h: HTTP %d %+v", code, got)
	}
	got.ExpiresAt = nil
	if out, e, c := in.cli("", "sandbox", "timeout", sb.ID, "0"); c != 0 || !strings.Contains(out, "no timeout") {
		t.Errorf("sandbox timeout 0: %d %q %s", c, out, e)
	}
	for _, bad := range []string{"soon", "-5m", "", "100000h"} {
		if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/timeout", map[string]any{"timeout": bad}, &got); code != http.StatusBadRequest {
			t.Errorf("timeout %q: HTTP %d %+v, want 400", bad, code, got)
		}
	}
	var e struct{ Message string }
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "idle_timeout": "2s", "idle_action": "sleep"}, &e); code != http.StatusBadRequest {
		t.Errorf("idle_action sleep: HTTP %d %+v", code, e)
	}
}

// TestCrashDuringHibernate kills the whole server (control plane, node,
// node-manager) while a hibernation is under way — at each of its steps in
// turn, by polling the sandbox's events — restarts it on the same data, and
// checks that the hibernation completes and a restore brings back exactly the
// acknowledged data.
func TestCrashDuringHibernate(t *testing.T) {
	dir := newDataDir(t)
	in := startServer(t, dir)
	sb := in.create("minimal")
	in.exec(sb.ID, "sh", "-c", "head -c 150000000 /dev/urandom > /home/user/big && sha256sum /home/user/big > /home/user/sum")
	sum := in.exec(sb.ID, "cat", "/home/user/sum").Stdout

	done := make(chan struct{})
	go func() {
		// The server dies under this request: its error is expected.
		defer close(done)
		req, _ := http.NewRequest("POST", in.url+"/v1/sandboxes/"+sb.ID+"/hibernate", nil)
		req.Header.Set("Authorization", "Bearer "+in.key)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	// Crash as soon as the snapshot is taken: the upload is under way.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _, _ := in.cli("", "sandbox", "events", sb.ID)
		if strings.Contains(out, "hibernate, ") || strings.Contains(out, "snapshot "+"sn-"+sb.ID+"-hibernate") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hibernate snapshot never taken:\n%s\n%s", out, in.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	in.kill()
	<-done

	in = startServer(t, dir)
	defer in.stop()
	deadline = time.Now().Add(3 * time.Minute)
	var got sandbox
	for {
		in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
		if got.State == "hibernated" || got.State == "paused" || got.State == "failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the crash the sandbox is still %+v\n%s", got, in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got.State != "hibernated" {
		t.Fatalf("after the crash and restart: %+v, want the hibernation completed", got)
	}
	if _, e, c := in.cli("", "sandbox", "restore", sb.ID); c != 0 {
		t.Fatalf("restore after the crash: %d %s\n%s", c, e, in.logs())
	}
	if res := in.exec(sb.ID, "sh", "-c", "sha256sum /home/user/big"); res.Stdout != sum {
		t.Errorf("after crash, hibernate and restore: %q, want %q", res.Stdout, sum)
	}
	in.delete(sb.ID)
}

// TestCrashDuringEachOperation kills the whole server (control plane, node
// and node-manager) right after each lifecycle operation is accepted —
// create, exec, stop, start, pause, resume, hibernate, restore, rollback,
// snapshot, fork, delete — restarts it on the same data, and checks that
// the sandbox settles in the operation's target state (repeating the
// operation when the crash lost it before it was recorded) with its
// acknowledged data, nothing half done; and that at the end the host holds
// nothing of the platform it did not hold before (inventory).
func TestCrashDuringEachOperation(t *testing.T) {
	dir := newDataDir(t)
	before := inventory(dir)
	in := startServer(t, dir)
	var ids []string

	// create, with an Idempotency-Key so that the repeat after the crash
	// finds the sandbox the first attempt recorded.
	createBody := `{"template":"minimal","runtime":"ns","memory_mib":256}`
	in = crashDuring(t, in, dir, "POST", "/v1/sandboxes", createBody, "crash-create")
	var sb sandbox
	if code := in.doIdem("crash-create", "POST", "/v1/sandboxes", []byte(createBody), &sb); code != http.StatusCreated {
		t.Fatalf("create repeated after the crash: HTTP %d %+v\n%s", code, sb, in.logs())
	}
	ids = append(ids, sb.ID)
	var list struct{ Sandboxes []sandbox }
	in.do("GET", "/v1/sandboxes", nil, &list)
	if len(list.Sandboxes) != 1 {
		t.Fatalf("after a crash mid-create and its repeat: %+v, want the one sandbox", list.Sandboxes)
	}
	in.exec(sb.ID, "sh", "-c", "echo acknowledged > /home/user/ack")
	// The inventory sees the platform: processes, mounts, the cgroups.
	if running := inventory(dir, sb.ID).extra(before); !inventorySees(running, "process", "mount", "cgroup") {
		t.Fatalf("the inventory of a running sandbox misses a kind:\n%s", strings.Join(running, "\n"))
	}

	// exec: the crash loses the command's answer, never the sandbox or
	// what an earlier exec wrote.
	in = crashDuring(t, in, dir, "POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"cmd":["sh","-c","echo unacknowledged > /home/user/maybe; sleep 1"]}`, "")
	if got := in.settle(sb.ID, "exec"); got.State != "running" {
		t.Fatalf("exec: after the crash the sandbox is %+v, want running", got)
	}
	if res := in.exec(sb.ID, "cat", "/home/user/ack"); res.Stdout != "acknowledged\n" {
		t.Errorf("exec: acknowledged data after the crash: %+v", res)
	}

	var snap snapshotJSON
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", nil, &snap); code != http.StatusCreated {
		t.Fatalf("snapshot: HTTP %d %+v", code, snap)
	}
	steps := []struct {
		op, path string
		body     string
		want     string // the state the sandbox must settle in
	}{
		{"stop", "/stop", "", "stopped"},
		{"start", "/start", "", "running"},
		{"pause", "/pause", "", "paused"},
		{"resume", "/resume", "", "running"},
		{"hibernate", "/hibernate", "", "hibernated"},
		{"restore", "/restore", "", "running"},
		{"rollback", "/rollback", `{"snapshot":"` + snap.ID + `"}`, "running"},
		{"snapshot", "/snapshots", `{"kind":"disk"}`, "running"},
		{"fork", "/fork", "", "running"},
	}
	for _, step := range steps {
		in = crashDuring(t, in, dir, "POST", "/v1/sandboxes/"+sb.ID+step.path, step.body, "")
		got := in.settle(sb.ID, step.op)
		// The request may have been lost before it was recorded: then
		// the sandbox is where it was and the operation is repeated.
		t.Logf("%s: after the crash %s %s", step.op, got.State, got.Reason)
		if got.State != step.want {
			var e struct{ Message string }
			if code := in.do("POST", "/v1/sandboxes/"+sb.ID+step.path, jsonBody(step.body), &e); code >= 300 {
				t.Fatalf("%s: repeating after the crash: HTTP %d %s (state %s: %s)\n%s", step.op, code, e.Message, got.State, got.Reason, in.logs())
			}
			in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
		}
		if got.State != step.want {
			t.Fatalf("%s: after the crash the sandbox is %+v, want %s", step.op, got, step.want)
		}
		if got.State == "running" {
			if res := in.exec(sb.ID, "cat", "/home/user/ack"); res.Stdout != "acknowledged\n" {
				t.Errorf("%s: acknowledged data after the crash: %+v", step.op, res)
			}
		}
	}
	// The fork, when the crash left it recorded, settles like any sandbox
	// and has the parent's data; it is deleted with the rest.
	in.do("GET", "/v1/sandboxes", nil, &list)
	if len(list.Sandboxes) == 1 {
		// The crash lost the fork before it was recorded: repeat it.
		var e struct{ Message string }
		if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/fork", nil, &e); code != http.StatusCreated && code != http.StatusAccepted {
			t.Fatalf("fork repeated after the crash: HTTP %d %s\n%s", code, e.Message, in.logs())
		}
		in.do("GET", "/v1/sandboxes", nil, &list)
	}
	for _, child := range list.Sandboxes {
		if child.ID == sb.ID {
			continue
		}
		ids = append(ids, child.ID)
		got := in.settle(child.ID, "fork child")
		t.Logf("fork child %s after the crash: %s %s", child.ID, got.State, got.Reason)
		if got.State == "failed" && got.Reason == "" {
			t.Errorf("fork child %s failed with no reason", child.ID)
		}
		if got.State == "running" {
			if res := in.exec(child.ID, "cat", "/home/user/ack"); res.Stdout != "acknowledged\n" {
				t.Errorf("fork child: parent's acknowledged data: %+v", res)
			}
		}
		in.delete(child.ID)
	}

	// delete: after the crash the sandbox is gone, or deleting it again
	// finishes it.
	in = crashDuring(t, in, dir, "DELETE", "/v1/sandboxes/"+sb.ID, "", "")
	for deadline := time.Now().Add(3 * time.Minute); ; {
		var got sandbox
		code := in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
		if code == http.StatusNotFound {
			break
		}
		if got.State != "deleting" {
			if code := in.do("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil); code != http.StatusNoContent && code != http.StatusNotFound {
				t.Fatalf("delete repeated after the crash: HTTP %d (state %+v)\n%s", code, got, in.logs())
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("delete: after the crash the sandbox is still %+v\n%s", got, in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	in.stop()
	checkInventory(t, before, dir, ids...)
}

// crashDuring sends a request, kills the server while it is being worked
// on, and returns the server restarted on the same data.
func crashDuring(t *testing.T, in *instance, dir, method, path, body, idemKey string) *instance {
	t.Helper()
	accepted := make(chan struct{})
	go func() {
		req, _ := http.NewRequest(method, in.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+in.key)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if idemKey != "" {
			req.Header.Set("Idempotency-Key", idemKey)
		}
		close(accepted)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-accepted
	time.Sleep(50 * time.Millisecond) // the request is being worked on
	in.kill()
	return startServer(t, dir)
}

// settle waits until sandbox id is in a settled state and returns it.
func (in *instance) settle(id, op string) sandbox {
	in.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var got sandbox
	for {
		in.do("GET", "/v1/sandboxes/"+id, nil, &got)
		switch got.State {
		case "running", "paused", "stopped", "hibernated", "failed":
			return got
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("%s: after the crash the sandbox is still %+v\n%s", op, got, in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// jsonBody turns a literal JSON body into what instance.do sends (nil for
// none).
func jsonBody(s string) any {
	if s == "" {
		return nil
	}
	return []byte(s)
}

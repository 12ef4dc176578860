package e2e

import (
	"cmp"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHibernateRestoreOnAnotherNode runs a second node beside the --dev one,
// sharing its object store and KMS: a sandbox hibernated on the first node
// comes back on the second with its files; a revoked tenant key makes the
// restore refused with the reason and leaves the sandbox hibernated; an
// object store that is gone makes hibernate fail cleanly, leaving the sandbox
// paused on its node.
func TestHibernateRestoreOnAnotherNode(t *testing.T) {
	dirA := newDataDir(t)
	in := startServer(t, dirA)
	defer in.stop()
	dirB := newDataDir(t)
	defer startNodeB(t, in, dirA, dirB)()
	waitNodes(t, in, "local", "node-b")

	sb := in.create("minimal")
	if sb.Node != "local" {
		t.Fatalf("sandbox placed on %q, want local (both free, ids in order)", sb.Node)
	}
	in.exec(sb.ID, "sh", "-c", "mkdir -p /home/user/w && head -c 3000000 /dev/urandom > /home/user/w/blob && sha256sum /home/user/w/blob > /home/user/w/sum && echo hello > /home/user/w/note")
	before := in.exec(sb.ID, "cat", "/home/user/w/sum").Stdout
	if _, e, c := in.cli("", "sandbox", "hibernate", sb.ID); c != 0 {
		t.Fatalf("hibernate: %d %s\n%s", c, e, in.logs())
	}
	// A second sandbox takes room on the first node: the restore goes to
	// the one with more free memory.
	filler := in.create("minimal")
	if _, e, c := in.cli("", "sandbox", "restore", sb.ID); c != 0 {
		t.Fatalf("restore: %d %s\n%s", c, e, in.logs())
	}
	var got sandbox
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
	if got.Node != "node-b" || got.State != "running" {
		t.Fatalf("restored sandbox: %+v, want running on node-b", got)
	}
	if after := in.exec(sb.ID, "sh", "-c", "cat /home/user/w/sum && sha256sum /home/user/w/blob && cat /home/user/w/note").Stdout; after != before+before+"hello\n" {
		t.Errorf("content after restore on node-b:\n%s\nwant twice %q and hello", after, before)
	}
	if res := in.exec(sb.ID, "hostname"); strings.TrimSpace(res.Stdout) != sb.ID {
		t.Errorf("hostname after restore = %q", res.Stdout)
	}

	// An admin chooses the node of a restore; an unknown node is refused
	// and leaves the sandbox hibernated.
	if _, e, c := in.cli("", "sandbox", "hibernate", sb.ID); c != 0 {
		t.Fatalf("hibernate before a placed restore: %d %s", c, e)
	}
	var bad struct{ Code, Message string }
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/restore", map[string]string{"node": "no-such-node"}, &bad); code != http.StatusNotFound {
		t.Errorf("restore on an unknown node: HTTP %d %+v, want 404", code, bad)
	}
	if _, e, c := in.cli("", "sandbox", "restore", "--node", "node-b", sb.ID); c != 0 {
		t.Fatalf("restore --node node-b: %d %s\n%s", c, e, in.logs())
	}
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
	if got.Node != "node-b" || got.State != "running" {
		t.Errorf("after restore --node node-b: %+v", got)
	}

	// Artifacts changed in the object store (F-3): a restore elsewhere,
	// which must download them, is refused with the reason and leaves the
	// sandbox hibernated; once the bytes are back it restores intact.
	testCorruptArtifactsRefused(t, in, dirA, sb, before)

	// Revoke the tenant's key: the hibernated sandbox cannot come back.
	if _, e, c := in.cli("", "sandbox", "hibernate", sb.ID); c != 0 {
		t.Fatalf("second hibernate: %d %s", c, e)
	}
	keys, e, c := in.cli("", "tenant", "encryption-keys", sb.Tenant, "-o", "json")
	if c != 0 {
		t.Fatalf("tenant encryption-keys: %d %s", c, e)
	}
	var kl struct {
		Keys []struct {
			ID string `json:"id"`
		} `json:"keys"`
	}
	if err := json.Unmarshal([]byte(keys), &kl); err != nil || len(kl.Keys) == 0 {
		t.Fatalf("keys: %v %q", err, keys)
	}
	for _, k := range kl.Keys {
		if _, e, c := in.cli("", "tenant", "revoke-encryption-key", sb.Tenant, k.ID); c != 0 {
			t.Fatalf("revoke %s: %d %s", k.ID, c, e)
		}
	}
	var refusal struct{ Code, Message string }
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/restore", nil, &refusal); code != http.StatusConflict || !strings.Contains(refusal.Message, "revoked") {
		t.Errorf("restore with a revoked key: HTTP %d %+v, want 409 saying the key was revoked", code, refusal)
	}
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
	if got.State != "hibernated" || !strings.Contains(got.Reason, "revoked") {
		t.Errorf("after the refused restore: %+v, want hibernated with the reason", got)
	}
	in.delete(sb.ID)

	// The object store is gone: hibernate fails cleanly, the sandbox stays
	// paused on its node and resumes.
	objects := filepath.Join(dirA, "objects")
	// Immutable: not even root can create or change anything in it.
	if out, err := exec.Command("chattr", "-R", "+i", objects).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i: %v %s", err, out)
	}
	in.exec(filler.ID, "sh", "-c", "echo still > /home/user/here")
	_, e, c = in.cli("", "sandbox", "hibernate", filler.ID)
	if out, err := exec.Command("chattr", "-R", "-i", objects).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v %s", err, out)
	}
	if c == 0 {
		t.Errorf("hibernate with the object store gone succeeded")
	}
	in.do("GET", "/v1/sandboxes/"+filler.ID, nil, &got)
	if got.State != "paused" || got.Node != "local" {
		t.Errorf("after the failed hibernate: %+v (%s), want paused on local", got, e)
	}
	if _, e, c := in.cli("", "sandbox", "resume", filler.ID); c != 0 {
		t.Fatalf("resume after the failed hibernate: %d %s", c, e)
	}
	if res := in.exec(filler.ID, "cat", "/home/user/here"); res.Stdout != "still\n" {
		t.Errorf("after the failed hibernate: %+v", res)
	}
	in.delete(filler.ID)
}

// waitNodes waits until every named node has registered.
func waitNodes(t *testing.T, in *instance, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var list struct {
			Nodes []struct {
				ID string `json:"id"`
			} `json:"nodes"`
		}
		in.do("GET", "/v1/nodes", nil, &list)
		have := map[string]bool{}
		for _, n := range list.Nodes {
			have[n.ID] = true
		}
		missing := false
		for _, id := range ids {
			missing = missing || !have[id]
		}
		if !missing {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes %v not all registered: %+v\n%s", ids, list, in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDrainMovesSandboxesToAnotherNode drains the --dev node while a second
// node runs beside it: its running sandbox moves to the second node (a
// hibernate and a restore: generation+1, its files intact), the drain
// answer names the stopped sandbox whose disk stays on the drained node,
// and new sandboxes go to the second node only.
func TestDrainMovesSandboxesToAnotherNode(t *testing.T) {
	dirA := newDataDir(t)
	in := startServer(t, dirA)
	defer in.stop()
	stopNodeB := startNodeB(t, in, dirA, newDataDir(t))
	defer stopNodeB()
	waitNodes(t, in, "local", "node-b")

	// With node-b draining, both sandboxes go to local.
	if _, e, c := in.cli("", "nodes", "drain", "node-b"); c != 0 {
		t.Fatalf("nodes drain node-b: %d %s\n%s", c, e, in.logs())
	}
	sb := in.create("minimal")
	stopped := in.create("minimal")
	if sb.Node != "local" || stopped.Node != "local" {
		t.Fatalf("sandboxes placed on %q and %q with node-b draining, want local", sb.Node, stopped.Node)
	}
	if _, e, c := in.cli("", "nodes", "undrain", "node-b"); c != 0 {
		t.Fatalf("nodes undrain node-b: %d %s", c, e)
	}
	in.exec(sb.ID, "sh", "-c", "mkdir -p /home/user/w && head -c 1000000 /dev/urandom > /home/user/w/blob && sha256sum /home/user/w/blob > /home/user/w/sum")
	before := in.exec(sb.ID, "cat", "/home/user/w/sum").Stdout
	if _, e, c := in.cli("", "sandbox", "stop", stopped.ID); c != 0 {
		t.Fatalf("stop: %d %s", c, e)
	}

	out, e, c := in.cli("", "nodes", "drain", "local", "-o", "json")
	if c != 0 {
		t.Fatalf("nodes drain: %d %s\n%s", c, e, in.logs())
	}
	var drained struct {
		State   string   `json:"state"`
		Stopped []string `json:"stopped_on_node"`
	}
	if err := json.Unmarshal([]byte(out), &drained); err != nil {
		t.Fatalf("drain answer %q: %v", out, err)
	}
	if drained.State != "draining" || len(drained.Stopped) != 1 || drained.Stopped[0] != stopped.ID {
		t.Errorf("drain answer %+v, want draining naming stopped sandbox %s", drained, stopped.ID)
	}

	var got sandbox
	deadline := time.Now().Add(3 * time.Minute)
	for {
		in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
		if got.Node == "node-b" && got.State == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox not moved to node-b: %+v\n%s", got, in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got.Generation != sb.Generation+1 {
		t.Errorf("generation after the move = %d, want %d", got.Generation, sb.Generation+1)
	}
	if after := in.exec(sb.ID, "sh", "-c", "cat /home/user/w/sum && sha256sum /home/user/w/blob").Stdout; after != before+before {
		t.Errorf("content after the move:\n%s\nwant twice %q", after, before)
	}
	var evs struct {
		Events []struct{ Type, Message string }
	}
	in.do("GET", "/v1/sandboxes/"+sb.ID+"/events", nil, &evs)
	moved := false
	for _, ev := range evs.Events {
		moved = moved || strings.Contains(ev.Message, "node local is draining: moving to node-b")
	}
	if !moved {
		t.Errorf("no move in the events: %+v", evs.Events)
	}

	// The drained node takes nothing new.
	if fresh := in.create("minimal"); fresh.Node != "node-b" {
		t.Errorf("a sandbox created during the drain went to %q, want node-b", fresh.Node)
	}
	list, e, c := in.cli("", "nodes", "list")
	if c != 0 {
		t.Fatalf("nodes list: %d %s", c, e)
	}
	if !strings.Contains(list, "draining") || !strings.Contains(list, "node-b") {
		t.Errorf("nodes list:\n%s\nwant local draining and node-b", list)
	}
	if _, e, c := in.cli("", "nodes", "undrain", "local"); c != 0 {
		t.Fatalf("nodes undrain: %d %s", c, e)
	}
	var nodes struct {
		Nodes []struct{ ID, State string }
	}
	in.do("GET", "/v1/nodes", nil, &nodes)
	for _, n := range nodes.Nodes {
		if n.ID == "local" && n.State != "ready" {
			t.Errorf("local after undrain is %s, want ready", n.State)
		}
	}
}

// startNodeB starts a second node, node-b, with its own node-manager in
// dirB, sharing the object store and KMS of the --dev server in dirA. The
// returned function deletes every sandbox and stops both processes.
func startNodeB(t *testing.T, in *instance, dirA, dirB string) func() {
	t.Helper()
	join, err := os.ReadFile(filepath.Join(dirA, "join.token"))
	if err != nil {
		t.Fatal(err)
	}
	pmSock := filepath.Join(dirB, "run", "node-manager.sock")
	pm := exec.Command(bin.space, "node-manager", "--data-dir", dirB, "--socket", pmSock, "--kernel-build", "wait")
	pm.Stderr = &lockedWriter{in: in}
	if err := pm.Start(); err != nil {
		t.Fatal(err)
	}
	node := exec.Command(bin.space, "node", "--server", in.url, "--join-token", strings.TrimSpace(string(join)),
		"--data-dir", dirB, "--id", "node-b", "--node-manager", pmSock, "--listen", "unix:"+filepath.Join(dirB, "run", "node.sock"),
		"--object-store", "file://"+filepath.Join(dirA, "objects"), "--kms-dir", filepath.Join(dirA, "kms"))
	node.Stderr = &lockedWriter{in: in}
	if err := node.Start(); err != nil {
		pm.Process.Kill()
		pm.Wait()
		t.Fatal(err)
	}
	return func() { stopNodeProcesses(t, in, node, pm) }
}

// stopNodeProcesses deletes every sandbox through in, then stops the given
// processes (a node and its node-manager) with SIGTERM, killing one that
// has not stopped within 30 s.
func stopNodeProcesses(tb testing.TB, in *instance, procs ...*exec.Cmd) {
	tb.Helper()
	var list struct{ Sandboxes []sandbox }
	in.do("GET", "/v1/sandboxes", nil, &list)
	for _, sb := range list.Sandboxes {
		in.do("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil)
	}
	for _, p := range procs {
		p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			tb.Errorf("%s did not stop within 30s of SIGTERM", p.Args[1])
			p.Process.Kill()
			<-done
		}
	}
}

// testCorruptArtifactsRefused hibernates sb (running on node-b) and, for
// each way an object of its snapshot can be wrong in the store — cut
// short, a byte flipped at the same size, another object's bytes in its
// place — asks for a restore on the --dev node, which has no copy and must
// download it: each is refused (409, the reason recorded) and the sandbox
// stays hibernated. With the object's bytes put back, the restore there
// succeeds with sb's files (sum is what /home/user/w/sum held).
func testCorruptArtifactsRefused(t *testing.T, in *instance, dirA string, sb sandbox, sum string) {
	t.Helper()
	since := time.Now()
	if _, e, c := in.cli("", "sandbox", "hibernate", sb.ID); c != 0 {
		t.Fatalf("hibernate before the corrupt restores: %d %s", c, e)
	}
	objs, older := objectsSince(t, filepath.Join(dirA, "objects"), since)
	if len(objs) == 0 || len(older) == 0 {
		t.Fatalf("the hibernation wrote objects %v, the earlier ones are %v: want some of each", objs, older)
	}
	big, other := objs[0], older[0] // largest first: this snapshot's, and an earlier one's
	orig, err := os.ReadFile(big)
	if err != nil {
		t.Fatal(err)
	}
	otherBytes, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), orig...)
	flipped[len(flipped)/2] ^= 0xff
	for _, tc := range []struct {
		name  string
		bytes []byte
	}{
		{"truncated", orig[:len(orig)/2]},
		{"a byte flipped", flipped},
		{"another object's bytes", otherBytes},
	} {
		// In place: the file keeps its inode and the store's digest
		// attribute, as a store that lies about its content would.
		if err := os.WriteFile(big, tc.bytes, 0o600); err != nil {
			t.Fatal(err)
		}
		var refusal struct{ Code, Message string }
		code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/restore", map[string]string{"node": "local"}, &refusal)
		var got sandbox
		in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
		if code != http.StatusConflict || got.State != "hibernated" || got.Reason == "" {
			t.Errorf("restore with %s in the store: HTTP %d %+v; sandbox %+v; want 409 and hibernated with the reason\n%s", tc.name, code, refusal, got, in.logs())
		} else {
			t.Logf("restore with %s: %s (reason %q)", tc.name, refusal.Message, got.Reason)
		}
	}
	if err := os.WriteFile(big, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, e, c := in.cli("", "sandbox", "restore", "--node", "local", sb.ID); c != 0 {
		t.Fatalf("restore once the object is whole again: %d %s\n%s", c, e, in.logs())
	}
	var got sandbox
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
	if got.Node != "local" || got.State != "running" {
		t.Errorf("after the restore with the object whole again: %+v, want running on local", got)
	}
	if after := in.exec(sb.ID, "cat", "/home/user/w/sum").Stdout; after != sum {
		t.Errorf("files after the restore: %q, want %q", after, sum)
	}
}

// objectsSince lists the object files of a filestore written since t and
// those written before, largest first.
func objectsSince(t *testing.T, dir string, since time.Time) (newer, older []string) {
	t.Helper()
	type obj struct {
		path string
		size int64
	}
	var objs []obj
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".tmp" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() && strings.HasSuffix(d.Name(), "@") {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			objs = append(objs, obj{p, fi.Size()})
			if fi.ModTime().Before(since) {
				objs[len(objs)-1].size = -1 - fi.Size() // older: sorted after, largest first
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Newer (size ≥ 0) before older (−1−size), each largest first.
	slices.SortFunc(objs, func(a, b obj) int {
		if (a.size >= 0) != (b.size >= 0) {
			return cmp.Compare(b.size, a.size)
		}
		if a.size >= 0 {
			return cmp.Compare(b.size, a.size)
		}
		return cmp.Compare(a.size, b.size)
	})
	for _, o := range objs {
		if o.size >= 0 {
			newer = append(newer, o.path)
		} else {
			older = append(older, o.path)
		}
	}
	return newer, older
}

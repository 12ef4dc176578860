package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/nodeclient"
)

// TestSigningKeyRotation rotates the capability signing key while requests
// flow: the new key is published to the node first and signs only after the
// activation delay, so not one request is refused; afterwards the new key
// signs and the old one is retired (it keeps verifying until its
// capabilities expire).
func TestSigningKeyRotation(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	sb := in.create("minimal")
	defer in.delete(sb.ID)
	before := signingKeys(t, in)
	newID, e, c := in.cli("", "signing-key", "rotate")
	newID = strings.TrimSpace(newID)
	if c != 0 || newID == "" {
		t.Fatalf("signing-key rotate: %d %q %s", c, newID, e)
	}
	deadline := time.Now().Add(capabilityActivationDelay + 2*time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		if res := in.exec(sb.ID, "echo", "ok"); res.Stdout != "ok\n" {
			t.Fatalf("request %d during the rotation: %+v", n, res)
		}
		time.Sleep(100 * time.Millisecond)
	}
	after := signingKeys(t, in)
	if after.Version <= before.Version {
		t.Errorf("key set version %d after rotation, was %d", after.Version, before.Version)
	}
	var signing, retired string
	for _, k := range after.Keys {
		if k.Signing {
			signing = k.ID
		}
		if k.RetiredAt != nil {
			retired = k.ID
		}
	}
	if signing != newID || retired == "" || retired == newID {
		t.Errorf("after the activation delay: signing %q, retired %q; want %s signing and the old key retired\n%+v", signing, retired, newID, after)
	}
	if res := in.exec(sb.ID, "echo", "still"); res.Stdout != "still\n" {
		t.Errorf("after the rotation: %+v", res)
	}
}

type signingKeyList struct {
	Version uint64 `json:"version"`
	Keys    []struct {
		ID        string     `json:"id"`
		Signing   bool       `json:"signing"`
		RetiredAt *time.Time `json:"retired_at"`
	} `json:"keys"`
}

func signingKeys(t *testing.T, in *instance) signingKeyList {
	t.Helper()
	out, e, c := in.cli("", "signing-key", "list", "-o", "json")
	if c != 0 {
		t.Fatalf("signing-key list: %d %s", c, e)
	}
	var l signingKeyList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("signing-key list: %v %q", err, out)
	}
	return l
}

// capabilityActivationDelay mirrors capability.ActivationDelay (the e2e
// tests drive binaries, not packages).
const capabilityActivationDelay = 10 * time.Second

// TestRetiredExecutionOnAPartitionedNode replays the seeds' story with real
// processes: sandbox S runs as generation g on node-b; node-b's sandbox
// manager goes down (its sandboxes keep running: a partition, as far as the
// control plane can tell); S is rolled back to a snapshot on the other node
// and runs there as g+1 without waiting for node-b; when node-b comes back
// its first heartbeat answer retires g: a still-valid capability for g is
// refused with RefreshRoute before anything reaches the guest, and so is a
// capability of g+1 that reaches node-b.
func TestRetiredExecutionOnAPartitionedNode(t *testing.T) {
	dirA := newDataDir(t)
	in := startServer(t, dirA)
	defer in.stop()
	dirB := newDataDir(t)
	second := startSecondNode(t, in, dirA, dirB)
	defer second.stopAll()

	sb := in.create("minimal")
	if sb.Node != "local" {
		t.Fatalf("sandbox on %q, want local", sb.Node)
	}
	var snapL snapshotJSON
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", nil, &snapL); code != http.StatusCreated {
		t.Fatalf("snapshot: HTTP %d %+v", code, snapL)
	}
	if _, e, c := in.cli("", "sandbox", "hibernate", sb.ID); c != 0 {
		t.Fatalf("hibernate: %s", e)
	}
	filler := in.create("minimal")
	defer in.delete(filler.ID)
	if _, e, c := in.cli("", "sandbox", "restore", sb.ID); c != 0 {
		t.Fatalf("restore: %s", e)
	}
	var onB sandbox
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &onB)
	if onB.Node != "node-b" {
		t.Fatalf("restored on %q, want node-b", onB.Node)
	}
	rec := nodeRecord(t, dirB, sb.ID, onB.Generation)
	// Whatever happens below, node-b's copy of generation g goes at the end
	// (the orphan sweep would take 30 s).
	defer second.stopExec(rec.ExecID)

	// node-b's sandbox manager goes away; its executions keep running.
	second.killNode()
	if _, e, c := in.cli("", "sandbox", "rollback", sb.ID, "--snapshot", snapL.ID); c != 0 {
		t.Fatalf("rollback while node-b is down: %s\n%s", e, in.logs())
	}
	var now sandbox
	in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &now)
	if now.Node != "local" || now.Generation != onB.Generation+1 {
		t.Fatalf("after the rollback: %+v, want generation %d on local", now, onB.Generation+1)
	}
	if !procAlive(rec.BridgePid) {
		t.Fatalf("generation %d's bridge on node-b is gone: the scenario needs it still running", onB.Generation)
	}

	keyring, err := capability.OpenKeyring(filepath.Join(dirA, "signing-keys.json"), "")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := keyring.Signer()
	if err != nil {
		t.Fatal(err)
	}
	mint := func(gen uint64, node, activation string) string {
		tok, err := signer.Mint(capability.Identity{Sandbox: sb.ID, Generation: gen, Node: node, Substrate: "ns", Activation: activation}, capability.OpExec, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		return capability.Encode(tok)
	}
	old := mint(onB.Generation, "node-b", rec.ActivationID)

	second.startNode()
	// The first heartbeat answer retires generation g on node-b.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := second.guestHealth(rec.ExecID, old)
		if code == http.StatusConflict && strings.Contains(body, "refresh_route") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an unexpired capability of the retired generation still gets HTTP %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := second.guestHealth(rec.ExecID, mint(now.Generation, "node-b", rec.ActivationID)); code != http.StatusConflict || !strings.Contains(body, "refresh_route") {
		t.Errorf("a capability of generation %d at node-b: HTTP %d %s, want RefreshRoute", now.Generation, code, body)
	}
	// The sandbox itself answers through its current execution.
	if res := in.exec(sb.ID, "echo", "current"); res.Stdout != "current\n" {
		t.Errorf("exec through the current execution: %+v", res)
	}
	in.delete(sb.ID)
}

// secondNode is a `space node-manager` and `space node` beside a --dev
// server, sharing its object store and KMS.
type secondNode struct {
	t         *testing.T
	in        *instance
	dirA, dir string
	pm, node  *exec.Cmd
}

func startSecondNode(t *testing.T, in *instance, dirA, dir string) *secondNode {
	t.Helper()
	s := &secondNode{t: t, in: in, dirA: dirA, dir: dir}
	s.pm = exec.Command(bin.space, "node-manager", "--data-dir", dir, "--socket", s.pmSocket(), "--kernel-build", "wait")
	s.pm.Stderr = &lockedWriter{in: in}
	if err := s.pm.Start(); err != nil {
		t.Fatal(err)
	}
	s.startNode()
	waitNodes(t, in, "local", "node-b")
	return s
}

func (s *secondNode) pmSocket() string  { return filepath.Join(s.dir, "run", "node-manager.sock") }
func (s *secondNode) apiSocket() string { return filepath.Join(s.dir, "run", "node.sock") }

// startNode starts node-b's sandbox manager.
func (s *secondNode) startNode() {
	s.t.Helper()
	join, err := os.ReadFile(filepath.Join(s.dirA, "join.token"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.node = exec.Command(bin.space, "node", "--server", s.in.url, "--join-token", strings.TrimSpace(string(join)),
		"--data-dir", s.dir, "--id", "node-b", "--node-manager", s.pmSocket(), "--listen", "unix:"+s.apiSocket(),
		"--object-store", "file://"+filepath.Join(s.dirA, "objects"), "--kms-dir", filepath.Join(s.dirA, "kms"))
	s.node.Stderr = &lockedWriter{in: s.in}
	if err := s.node.Start(); err != nil {
		s.t.Fatal(err)
	}
}

// killNode kills node-b's sandbox manager (SIGKILL); what it started runs on.
func (s *secondNode) killNode() {
	s.node.Process.Kill()
	s.node.Wait()
}

// guestHealth sends GET /health for execID to node-b's node-api with a
// capability and returns the status and body.
func (s *secondNode) guestHealth(execID, capabilityToken string) (int, string) {
	s.t.Helper()
	return s.nodeAPI("GET", "/node/v1/executions/"+execID+"/guest/health", capabilityToken)
}

// stopExec stops an execution on node-b through its node-api.
func (s *secondNode) stopExec(execID string) {
	s.t.Helper()
	if s.node == nil || s.node.ProcessState != nil {
		s.startNode() // its node process was killed and not restarted
		waitNodes(s.t, s.in, "node-b")
	}
	token, err := os.ReadFile(filepath.Join(s.dir, "node.token"))
	if err != nil {
		s.t.Fatal(err)
	}
	c, err := nodeclient.New("unix:"+s.apiSocket(), strings.TrimSpace(string(token)))
	if err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.Stop(ctx, execID)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Errorf("stop %s on node-b: %v", execID, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *secondNode) nodeAPI(method, path, capabilityToken string) (int, string) {
	s.t.Helper()
	token, err := os.ReadFile(filepath.Join(s.dir, "node.token"))
	if err != nil {
		s.t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", s.apiSocket())
	}}, Timeout: 10 * time.Second}
	req, _ := http.NewRequest(method, "http://node"+path, nil)
	req.Header.Set("X-Space-Node-Token", strings.TrimSpace(string(token)))
	if capabilityToken != "" {
		req.Header.Set(capability.Header, capabilityToken)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20)) // the node's metrics included
	return resp.StatusCode, string(b)
}

// stopAll deletes the sandboxes and stops node-b's processes.
func (s *secondNode) stopAll() {
	var list struct{ Sandboxes []sandbox }
	s.in.do("GET", "/v1/sandboxes", nil, &list)
	for _, sb := range list.Sandboxes {
		s.in.do("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil)
	}
	for _, p := range []*exec.Cmd{s.node, s.pm} {
		if p == nil || p.Process == nil || p.ProcessState != nil {
			continue
		}
		p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			s.t.Errorf("%s did not stop", p.Args[1])
			p.Process.Kill()
		}
	}
}

// nodeRecord reads the runtime record of sandbox id's generation gen on the
// node whose data dir is dir.
func nodeRecord(t *testing.T, dir, id string, gen uint64) struct {
	ExecID       string `json:"exec_id"`
	ActivationID string `json:"activation_id"`
	BridgePid    int    `json:"bridge_pid"`
} {
	t.Helper()
	var rec struct {
		ExecID       string `json:"exec_id"`
		ActivationID string `json:"activation_id"`
		BridgePid    int    `json:"bridge_pid"`
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "node", "execs", fmt.Sprintf("%s-g%d-*", id, gen), "record.json"))
	if len(matches) != 1 {
		t.Fatalf("records of %s generation %d: %v", id, gen, matches)
	}
	b, err := os.ReadFile(matches[0])
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func procAlive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

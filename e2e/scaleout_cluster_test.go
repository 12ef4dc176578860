package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/nodeclient"
	"github.com/spacesandbox/space/internal/objstore/s3store/s3test"
	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
)

// nodeLostAfter is how long the scale-out cluster's control plane waits for
// a silent node before it declares it lost.
const nodeLostAfter = 5 * time.Second

// cluster is a scale-out SPACE on this machine, all real processes: a
// PostgreSQL server, a versitygw S3 server, control-plane replicas sharing
// them (and one data directory, as the Kubernetes manifests share one
// volume), the balancer in front of them, and nodes (node-manager + node)
// each in its own network namespace.
type cluster struct {
	tb testing.TB
	// api reaches the API through the balancer with the admin key; every
	// process's output is collected in its log.
	api *instance
	net *testNet
	pg  *pgtest.Server
	s3  *s3test.Server
	lb  *balancer

	dbURL, objURL string
	s3Env         []string
	// shared holds server/ (the replicas' data directory) and kms/.
	shared    string
	joinToken string
	// nodeLoss is whether this build's server has --node-lost-after.
	nodeLoss bool

	replicas []*replica
	nodes    []*clusterNode
}

type replica struct {
	p    *proc
	addr string
}

type clusterNode struct {
	i        int
	id       string
	addr     string // host:port of its node API
	dir      string
	pm, node *proc
}

// startCluster starts a cluster of the given size and waits until every
// node is registered and the minimal template is ready.
func startCluster(tb testing.TB, replicas, nodes int) *cluster {
	tb.Helper()
	if bin.err != nil {
		tb.Fatalf("build: %v", bin.err)
	}
	start := time.Now()
	c := &cluster{tb: tb, shared: tb.TempDir()}
	c.api = &instance{t: tb, exited: make(chan struct{})}
	c.nodeLoss = serverHasFlag("node-lost-after")

	c.pg = pgtest.Start(tb)
	c.dbURL = c.pg.NewDatabase(tb)
	s3 := s3test.Start(tb)
	c.s3 = s3
	c.net = newTestNet(tb, nodes)
	// The nodes reach the S3 server (on 127.0.0.1) through a forwarder on
	// the bridge address; every process uses that one URL.
	s3Addr := forwardTCP(tb, c.net.hostAddr(), s3.Endpoint)
	c.objURL = "s3://" + s3.Bucket + "/scaleout?endpoint=" + s3Addr + "&insecure=1"
	c.s3Env = []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey}
	for _, d := range []string{"server", "kms"} {
		if err := os.MkdirAll(filepath.Join(c.shared, d), 0o700); err != nil {
			tb.Fatal(err)
		}
	}
	// Cleanups run last-registered first: stop nodes before replicas.
	tb.Cleanup(c.stopReplicas)
	tb.Cleanup(func() {
		if path := os.Getenv("SPACE_TEST_SCALEOUT_LOG"); path != "" {
			c.api.logMu.Lock()
			_ = os.WriteFile(path, c.api.log.Bytes(), 0o600)
			c.api.logMu.Unlock()
		} else if tb.Failed() {
			tb.Logf("the cluster's processes said (set SPACE_TEST_SCALEOUT_LOG=FILE for all of it):\n%s", c.api.logs())
		}
	})

	// One replica first: it mints the admin key and join token the others
	// then read (docs/kubernetes.md: two fresh replicas may both mint one).
	c.replicas = make([]*replica, replicas)
	c.startReplica(0)
	c.lb = startBalancer(tb, c.net.hostAddr(), []string{c.replicas[0].addr})
	c.api.url = c.lb.URL()
	key, err := os.ReadFile(filepath.Join(c.shared, "server", "admin.key"))
	if err != nil {
		tb.Fatalf("admin key: %v", err)
	}
	c.api.key = strings.TrimSpace(string(key))
	tok, err := os.ReadFile(filepath.Join(c.shared, "server", "join.token"))
	if err != nil {
		tb.Fatalf("join token: %v", err)
	}
	c.joinToken = strings.TrimSpace(string(tok))

	tb.Cleanup(c.stopNodes)
	c.nodes = make([]*clusterNode, nodes)
	for i := range nodes {
		c.nodes[i] = &clusterNode{i: i, id: fmt.Sprintf("node-%d", i+1), addr: net.JoinHostPort(c.net.nodes[i].addr, "7071"), dir: tb.TempDir()}
		c.startNodeManager(i)
		c.startNode(i)
	}
	c.waitNodesLive(time.Minute, c.nodeIDs()...)
	c.api.waitTemplate("minimal")
	for i := 1; i < replicas; i++ {
		c.startReplica(i)
		c.lb.setBackend(i, c.replicas[i].addr)
	}
	tb.Logf("cluster of %d replicas and %d nodes ready in %v (node loss: %v)", replicas, nodes, time.Since(start).Round(time.Millisecond), c.nodeLoss)
	return c
}

// serverHasFlag reports whether `space server` has the flag.
func serverHasFlag(name string) bool {
	out, _ := exec.Command(bin.space, "server", "-help").CombinedOutput()
	return strings.Contains(string(out), "-"+name+" ")
}

func (c *cluster) nodeIDs() []string {
	var ids []string
	for _, n := range c.nodes {
		ids = append(ids, n.id)
	}
	return ids
}

// startReplica starts (or restarts) replica i and waits until it serves.
func (c *cluster) startReplica(i int) {
	c.tb.Helper()
	args := []string{bin.space, "server", "--listen", net.JoinHostPort(c.net.hostAddr(), "0"),
		"--data-dir", filepath.Join(c.shared, "server"), "--kms-dir", filepath.Join(c.shared, "kms"),
		"--database", c.dbURL, "--object-store", c.objURL, "--no-base-template"}
	if c.nodeLoss {
		args = append(args, "--node-lost-after", nodeLostAfter.String())
	}
	name := fmt.Sprintf("replica-%d", i)
	pr, pw := io.Pipe()
	p := startProc(c.tb, name, &lockedWriter{in: c.api}, c.s3Env, pw, args...)
	go func() { <-p.exited; pw.Close() }()
	lines := linesOf(pr, &prefixWriter{prefix: "[" + name + "] ", w: &lockedWriter{in: c.api}})
	deadline := time.After(time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				c.tb.Fatalf("%s exited before it was ready:\n%s", name, c.api.logs())
			}
			if v, ok := strings.CutPrefix(l, "SPACE_API_URL=http://"); ok {
				c.replicas[i] = &replica{p: p, addr: v}
				return
			}
		case <-deadline:
			p.killGroup()
			c.tb.Fatalf("%s not ready after 1m:\n%s", name, c.api.logs())
		}
	}
}

// replicaURL is replica i's own URL, bypassing the balancer.
func (c *cluster) replicaURL(i int) string { return "http://" + c.replicas[i].addr }

// killReplica kills replica i with SIGKILL, like a crash.
func (c *cluster) killReplica(i int) { c.replicas[i].p.kill9() }

func (c *cluster) stopReplicas() {
	for i, r := range c.replicas {
		if r != nil && !r.p.stop(30*time.Second) {
			c.tb.Errorf("replica %d did not stop within 30s of SIGTERM", i)
		}
		if r != nil {
			r.p.killGroup()
		}
	}
}

// inNetns is the command line that runs argv in node i's network
// namespace, and only that one (the mount namespace stays the host's, so
// the node-manager's mounts are visible to cleanup).
func (c *cluster) inNetns(i int, argv ...string) []string {
	return append([]string{"nsenter", "--net=" + c.net.nsPath(i), "--"}, argv...)
}

func (c *cluster) startNodeManager(i int) {
	n := c.nodes[i]
	n.pm = startProc(c.tb, n.id+"-manager", &lockedWriter{in: c.api}, nil, nil,
		c.inNetns(i, bin.space, "node-manager", "--data-dir", n.dir, "--socket", filepath.Join(n.dir, "run", "node-manager.sock"), "--kernel-build", "wait")...)
}

func (c *cluster) startNode(i int) {
	n := c.nodes[i]
	n.node = startProc(c.tb, n.id, &lockedWriter{in: c.api}, c.s3Env, nil,
		c.inNetns(i, bin.space, "node", "--server", c.lb.URL(), "--join-token", c.joinToken,
			"--data-dir", n.dir, "--id", n.id, "--node-manager", filepath.Join(n.dir, "run", "node-manager.sock"),
			"--listen", n.addr, "--advertise", n.addr,
			"--object-store", c.objURL, "--kms-dir", filepath.Join(c.shared, "kms"), "--sandbox-network=false")...)
}

// killNode kills node i's sandbox manager and node-manager with SIGKILL, as
// a machine loss would; the sandboxes they started keep running, as they
// would behind a network partition (the harder case for the control plane:
// a stale execution is still there when the node comes back).
func (c *cluster) killNode(i int) {
	c.nodes[i].node.kill9()
	c.nodes[i].pm.kill9()
}

// stopNodes deletes every sandbox, stops the nodes and checks that nothing
// of theirs is left: processes, mounts, loop devices, cgroups.
func (c *cluster) stopNodes() {
	var execIDs []string
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		// Sandboxes' executions, and the warm pool's (the runtime's state).
		for _, d := range []string{filepath.Join(n.dir, "node", "execs"), filepath.Join(n.dir, "ns")} {
			ents, _ := os.ReadDir(d)
			for _, e := range ents {
				execIDs = append(execIDs, e.Name())
			}
		}
	}
	c.deleteAllSandboxes()
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		// Executions a lost node kept (retired, or of deleted sandboxes)
		// are stopped by their node.
		ents, _ := os.ReadDir(filepath.Join(n.dir, "node", "execs"))
		for _, e := range ents {
			if n.node != nil && n.node.alive() {
				c.stopExecution(n.i, e.Name())
			}
		}
	}
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		for _, p := range []*proc{n.node, n.pm} {
			if p != nil && !p.stop(30*time.Second) {
				c.tb.Errorf("%s did not stop within 30s of SIGTERM", p.name)
			}
		}
	}
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			left := leftovers(n.dir, execIDs)
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				c.tb.Errorf("%s left behind:\n%s", n.id, strings.Join(left, "\n"))
				forceClean(n.dir)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		for _, p := range []*proc{n.node, n.pm} {
			if p != nil {
				p.killGroup()
			}
		}
	}
}

// deleteAllSandboxes deletes every sandbox through the API and waits until
// the list is empty.
func (c *cluster) deleteAllSandboxes() {
	deadline := time.Now().Add(time.Minute)
	for {
		var list struct{ Sandboxes []sandbox }
		if c.tryDo("GET", "/v1/sandboxes", nil, &list) != http.StatusOK {
			if time.Now().After(deadline) {
				c.tb.Errorf("cannot list the sandboxes to delete them")
				return
			}
			time.Sleep(time.Second)
			continue
		}
		if len(list.Sandboxes) == 0 {
			return
		}
		for _, sb := range list.Sandboxes {
			c.tryDo("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil)
		}
		if time.Now().After(deadline) {
			c.tb.Errorf("sandboxes left after a minute of deleting: %+v", list.Sandboxes)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// tryDo is instance.do through the balancer without failing the test on a
// transport error (0 then).
func (c *cluster) tryDo(method, path string, body, out any) int {
	return tryDo(c.api.url, c.api.key, method, path, body, out, nil)
}

func tryDo(base, key, method, path string, body, out any, hdr http.Header) int {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = strings.NewReader(string(b))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, base+path, r)
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		_ = json.Unmarshal(b, out)
	}
	return resp.StatusCode
}

// apiNode is a node as GET /v1/nodes reports it.
type apiNode struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Live  bool   `json:"live"`
}

func (c *cluster) listNodes() []apiNode {
	var list struct{ Nodes []apiNode }
	c.tryDo("GET", "/v1/nodes", nil, &list)
	return list.Nodes
}

// waitNodesLive waits until every named node is registered and live.
func (c *cluster) waitNodesLive(timeout time.Duration, ids ...string) {
	c.tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		live := map[string]bool{}
		nodes := c.listNodes()
		for _, n := range nodes {
			live[n.ID] = n.Live
		}
		missing := []string{}
		for _, id := range ids {
			if !live[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("nodes %v not live after %v: %+v\n%s", missing, timeout, nodes, c.api.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// get reads a sandbox through the balancer.
func (c *cluster) get(id string) sandbox {
	var sb sandbox
	c.tryDo("GET", "/v1/sandboxes/"+id, nil, &sb)
	return sb
}

// nodeIndex returns the index of the node with the id.
func (c *cluster) nodeIndex(id string) int {
	c.tb.Helper()
	for i, n := range c.nodes {
		if n.id == id {
			return i
		}
	}
	c.tb.Fatalf("no node %q in the cluster", id)
	return -1
}

// nodeAPI sends a request to node i's node API with its node token and,
// when not empty, a capability.
func (c *cluster) nodeAPI(i int, method, path, capabilityToken string) (int, string) {
	token, err := os.ReadFile(filepath.Join(c.nodes[i].dir, "node.token"))
	if err != nil {
		return 0, err.Error()
	}
	req, _ := http.NewRequest(method, "http://"+c.nodes[i].addr+path, nil)
	req.Header.Set("X-Space-Node-Token", strings.TrimSpace(string(token)))
	if capabilityToken != "" {
		req.Header.Set(capability.Header, capabilityToken)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// stopExecution stops an execution on node i through its node API.
func (c *cluster) stopExecution(i int, execID string) {
	token, err := os.ReadFile(filepath.Join(c.nodes[i].dir, "node.token"))
	if err != nil {
		c.tb.Errorf("stop %s on %s: %v", execID, c.nodes[i].id, err)
		return
	}
	nc, err := nodeclient.New(c.nodes[i].addr, strings.TrimSpace(string(token)))
	if err != nil {
		c.tb.Errorf("stop %s on %s: %v", execID, c.nodes[i].id, err)
		return
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := nc.Stop(ctx, execID)
		cancel()
		if err == nil || errors.Is(err, errdefs.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Errorf("stop %s on %s: %v", execID, c.nodes[i].id, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// mint makes an exec capability for an execution of sandbox id with the
// control plane's signing key.
func (c *cluster) mint(id string, gen uint64, node, activation string) string {
	c.tb.Helper()
	keyring, err := capability.OpenKeyring(filepath.Join(c.shared, "server", "signing-keys.json"), "")
	if err != nil {
		c.tb.Fatal(err)
	}
	signer, err := keyring.Signer()
	if err != nil {
		c.tb.Fatal(err)
	}
	tok, err := signer.Mint(capability.Identity{Sandbox: id, Generation: gen, Node: node, Substrate: "ns", Activation: activation}, capability.OpExec, 0, "")
	if err != nil {
		c.tb.Fatal(err)
	}
	return capability.Encode(tok)
}

// forwardTCP forwards connections to host:0 to target until the test ends,
// and returns the address it listens on.
func forwardTCP(tb testing.TB, host, target string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		tb.Fatalf("forwarder: %v", err)
	}
	done := make(chan struct{})
	tb.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { io.Copy(out, in); out.(*net.TCPConn).CloseWrite() }()
				io.Copy(in, out)
			}()
		}
	}()
	return ln.Addr().String()
}

package e2e

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// warmPoolStatus is the part of GET /v1/nodes' warm_pool the tests read.
type warmPoolStatus struct {
	Template    string `json:"template"`
	Runtime     string `json:"runtime"`
	MemoryMiB   int    `json:"memory_mib"`
	Ready       int    `json:"ready"`
	Filling     int    `json:"filling"`
	Hits        uint64 `json:"hits"`
	Misses      uint64 `json:"misses"`
	MemoryBytes uint64 `json:"memory_bytes"`
}

// warmPool returns the (only) node's warm pool entry for template and
// runtime at the harness's create size (256 MiB).
func (in *instance) warmPool(template, runtime string) warmPoolStatus {
	in.t.Helper()
	var list struct {
		Nodes []struct {
			WarmPool []warmPoolStatus `json:"warm_pool"`
		} `json:"nodes"`
	}
	if code := in.do("GET", "/v1/nodes", nil, &list); code != http.StatusOK {
		in.t.Fatalf("list nodes: HTTP %d", code)
	}
	for _, n := range list.Nodes {
		for _, p := range n.WarmPool {
			if p.Template == template && p.Runtime == runtime && p.MemoryMiB == 256 {
				return p
			}
		}
	}
	return warmPoolStatus{}
}

// waitWarm waits until the node reports n prepared sandboxes ready.
func (in *instance) waitWarm(template, runtime string, n int) warmPoolStatus {
	in.t.Helper()
	deadline := time.Now().Add(5 * time.Minute) // vm: the guest kernel may still be fetched
	for {
		p := in.warmPool(template, runtime)
		if p.Ready >= n {
			return p
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("warm pool %s/%s: %+v after 5m, want %d ready\n%s", template, runtime, p, n, in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// wasWarm reports whether sandbox id's events say it got a prepared
// execution.
func (in *instance) wasWarm(id string) bool {
	in.t.Helper()
	var list struct {
		Events []struct{ Type, Message string }
	}
	in.do("GET", "/v1/sandboxes/"+id+"/events", nil, &list)
	for _, e := range list.Events {
		if strings.Contains(e.Message, "warm pool") && strings.Contains(e.Message, "running on") {
			return true
		}
	}
	return false
}

// TestWarmPool: with --warm-pool the node keeps prepared ns sandboxes; a
// create of that shape claims one and it is the caller's own — its
// identity, host name and environment — holding nothing of another
// sandbox's; the pool refills; a create of another shape still works
// (cold); pause/resume, stop/start and delete work on a claimed execution.
func TestWarmPool(t *testing.T) {
	in := startServerWith(t, newDataDir(t), "--warm-pool", "minimal:ns:1x256=2")
	defer in.stop()
	in.waitWarm("minimal", "ns", 2)

	var a, b struct {
		sandbox
		Message string `json:"message"`
	}
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256, "env": map[string]string{"WHO": "tenant-a"}}, &a); code != http.StatusCreated {
		t.Fatalf("create a: HTTP %d %s", code, a.Message)
	}
	defer in.delete(a.ID)
	if !in.wasWarm(a.ID) {
		t.Fatalf("sandbox a did not come from the warm pool; events say otherwise\n%s", in.logs())
	}
	if got := strings.TrimSpace(in.exec(a.ID, "hostname").Stdout); got != a.ID {
		t.Errorf("hostname of a claimed sandbox = %q, want its id %s", got, a.ID)
	}
	if got := strings.TrimSpace(in.exec(a.ID, "sh", "-c", "echo $WHO").Stdout); got != "tenant-a" {
		t.Errorf("env of a claimed sandbox: WHO = %q, want tenant-a", got)
	}
	in.exec(a.ID, "sh", "-c", "echo secret-of-a > /tmp/secret; echo secret-of-a > /home/user/secret")

	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256}, &b); code != http.StatusCreated {
		t.Fatalf("create b: HTTP %d %s", code, b.Message)
	}
	defer in.delete(b.ID)
	if !in.wasWarm(b.ID) {
		t.Errorf("sandbox b did not come from the warm pool")
	}
	if got := strings.TrimSpace(in.exec(b.ID, "hostname").Stdout); got != b.ID {
		t.Errorf("hostname of b = %q, want %s", got, b.ID)
	}
	if got := in.exec(b.ID, "sh", "-c", "cat /tmp/secret /home/user/secret 2>&1; echo WHO=$WHO"); strings.Contains(got.Stdout, "secret-of-a") || strings.Contains(got.Stdout, "tenant-a") {
		t.Errorf("sandbox b sees sandbox a's data: %q", got.Stdout)
	}
	if got := strings.TrimSpace(in.exec(b.ID, "id", "-un").Stdout); got != "user" {
		t.Errorf("default user in a claimed sandbox = %q, want user", got)
	}
	// Each claimed sandbox trusts its own interception CA and no other's:
	// the bundle a claim appends to was read when the execution was
	// prepared, before any tenant had it.
	const anchor, bundle = "/usr/local/share/ca-certificates/space-sandbox-ca.crt", "/etc/ssl/certs/ca-certificates.crt"
	caA := in.exec(a.ID, "cat", anchor).Stdout
	caB := in.exec(b.ID, "cat", anchor).Stdout
	if !strings.Contains(caA, "BEGIN CERTIFICATE") || !strings.Contains(caB, "BEGIN CERTIFICATE") || caA == caB {
		t.Errorf("claimed sandboxes' CA anchors: a %q, b %q; want a certificate each, not the same", caA, caB)
	}
	for _, sb := range []struct{ id, own, other string }{{a.ID, caA, caB}, {b.ID, caB, caA}} {
		got := in.exec(sb.id, "cat", bundle).Stdout
		if strings.Count(got, sb.own) != 1 || strings.Contains(got, sb.other) {
			t.Errorf("bundle of %s: has its own CA %d times (want 1), the other sandbox's: %v\n%s", sb.id, strings.Count(got, sb.own), strings.Contains(got, sb.other), got)
		}
	}

	// Claimed executions are handed out once: the pool prepares new ones
	// (reports lag by a heartbeat).
	deadline := time.Now().Add(time.Minute)
	p := in.warmPool("minimal", "ns")
	for (p.Hits < 2 || p.Ready < 2) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		p = in.warmPool("minimal", "ns")
	}
	if p.Hits != 2 || p.Ready != 2 {
		t.Errorf("pool after two warm creates: %+v, want 2 hits and 2 ready again", p)
	}
	if p.MemoryBytes == 0 {
		t.Errorf("pool reports no memory held by %d ready sandboxes: %+v", p.Ready, p)
	}

	// Another size is not in the pool: started cold, and still fine.
	var c struct {
		sandbox
		Message string `json:"message"`
	}
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 300}, &c); code != http.StatusCreated {
		t.Fatalf("create c: HTTP %d %s", code, c.Message)
	}
	if in.wasWarm(c.ID) {
		t.Errorf("a 300 MiB sandbox claimed a 256 MiB prepared one")
	}
	in.delete(c.ID)

	// The lifecycle of a claimed execution: its runtime knows it by the id
	// it was prepared under.
	if _, e, code := in.cli("", "sandbox", "pause", a.ID); code != 0 {
		t.Fatalf("pause a: %s", e)
	}
	if _, e, code := in.cli("", "sandbox", "resume", a.ID); code != 0 {
		t.Fatalf("resume a: %s", e)
	}
	if _, e, code := in.cli("", "sandbox", "stop", a.ID); code != 0 {
		t.Fatalf("stop a: %s\n%s", e, in.logs())
	}
	if _, e, code := in.cli("", "sandbox", "start", a.ID); code != 0 {
		t.Fatalf("start a: %s\n%s", e, in.logs())
	}
	if got := strings.TrimSpace(in.exec(a.ID, "cat", "/home/user/secret").Stdout); got != "secret-of-a" {
		t.Errorf("after stop/start of a claimed sandbox: /home/user/secret = %q", got)
	}
}

// TestWarmPoolVM: prepared VMs are restored from one template snapshot, so
// before their claim they share one RNG state; the claim reseeds it, and two
// claimed VMs draw different random bytes.
func TestWarmPoolVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
	in := startServerWith(t, newDataDir(t), "--warm-pool", "minimal:vm:1x256=2")
	defer in.stop()
	in.waitWarm("minimal", "vm", 2)
	a := in.createWith("minimal", "vm")
	defer in.delete(a.ID)
	b := in.createWith("minimal", "vm")
	defer in.delete(b.ID)
	for _, sb := range []sandbox{a, b} {
		if !in.wasWarm(sb.ID) {
			t.Errorf("vm sandbox %s did not come from the warm pool\n%s", sb.ID, in.logs())
		}
		if got := strings.TrimSpace(in.exec(sb.ID, "hostname").Stdout); got != sb.ID {
			t.Errorf("hostname = %q, want %s", got, sb.ID)
		}
	}
	draw := "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'"
	ra, rb := in.exec(a.ID, "sh", "-c", draw).Stdout, in.exec(b.ID, "sh", "-c", draw).Stdout
	if len(ra) != 64 || ra == rb {
		t.Errorf("random bytes of two claimed VMs: %q and %q, want 32 different bytes each", ra, rb)
	}
	in.exec(a.ID, "sh", "-c", "echo mine > /home/user/mine")
	if got := in.exec(b.ID, "sh", "-c", "cat /home/user/mine 2>&1").Stdout; strings.Contains(got, "mine\n") && !strings.Contains(got, "No such") {
		t.Errorf("vm b sees vm a's file: %q", got)
	}
}

// TestWarmPoolLifecycle runs the whole lifecycle scenario (snapshots,
// rollback, fork, stop/start, crash recovery, hibernate/restore) on a
// sandbox that claimed a prepared execution.
func TestWarmPoolLifecycle(t *testing.T) {
	lifecycleScenario(t, "ns", "--warm-pool", "minimal:ns:1x256=1")
}

// TestBenchAgainstServer runs `space bench all` against a real server with
// a warm pool: every row is there, the creates claimed prepared sandboxes,
// and the run leaves no sandbox behind.
func TestBenchAgainstServer(t *testing.T) {
	in := startServerWith(t, newDataDir(t), "--warm-pool", "minimal:ns:1x256=3")
	defer in.stop()
	in.waitWarm("minimal", "ns", 3)
	out, errOut, code := in.cli("", "bench", "all", "--runtime", "ns", "--memory", "256", "--count", "2", "-o", "json")
	if code != 0 {
		t.Fatalf("space bench all: exit %d\n%s\n%s", code, errOut, in.logs())
	}
	var rep struct {
		Machine   map[string]any `json:"machine"`
		Scenarios map[string]struct {
			N     int     `json:"n"`
			P50MS float64 `json:"p50_ms"`
		} `json:"scenarios"`
		Notes map[string]string `json:"notes"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bench JSON: %v\n%s", err, out)
	}
	for _, name := range []string{"create", "exec", "files_write_1mib", "files_read_1mib", "files_write_100mib", "files_read_100mib", "pause", "resume", "snapshot_disk", "hibernate", "restore", "fork", "rollback"} {
		if s, ok := rep.Scenarios[name]; !ok || s.N != 2 || s.P50MS <= 0 {
			t.Errorf("scenario %s: %+v (present %v), want 2 timed operations", name, s, ok)
		}
	}
	if note := rep.Notes["create"]; note != "2 of 2 from a warm pool" {
		t.Errorf("create note %q, want both creates from the warm pool", note)
	}
	var list struct{ Sandboxes []sandbox }
	in.do("GET", "/v1/sandboxes", nil, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("sandboxes left after the bench: %+v", list.Sandboxes)
	}
}

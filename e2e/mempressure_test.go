package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/mempressure"
)

// nodeMemory is the part of GET /v1/nodes the memory tests read.
type nodeMemory struct {
	ID             string `json:"id"`
	MemoryMiB      int    `json:"memory_mib"`
	CommittedMiB   int    `json:"committed_mib"`
	MemoryLimitMiB int    `json:"memory_limit_mib"`
	MemoryMeasured bool   `json:"memory_measured"`
	MemoryTotalMiB int    `json:"memory_total_mib"`
	AvailableMiB   int    `json:"available_mib"`
	UsedMiB        int    `json:"used_mib"`
	MemoryPressure string `json:"memory_pressure"`
}

// localNode returns the dev server's node as GET /v1/nodes shows it.
func (in *instance) localNode() nodeMemory {
	in.t.Helper()
	var list struct{ Nodes []nodeMemory }
	if code := in.do("GET", "/v1/nodes", nil, &list); code != http.StatusOK || len(list.Nodes) != 1 {
		in.t.Fatalf("GET /v1/nodes: HTTP %d %+v", code, list)
	}
	return list.Nodes[0]
}

// waitLocalNode waits up to 30 s for the node's listing to satisfy ok.
func (in *instance) waitLocalNode(what string, ok func(nodeMemory) bool) nodeMemory {
	in.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := in.localNode()
		if ok(n) {
			return n
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("node not %s after 30s: %+v", what, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestNodeMemoryAndPressureAdmission: the dev server's node reports its
// real memory (sane against MemTotal), GET /v1/nodes counts a created
// sandbox's limit as committed, and with memory pressure injected (the
// test-only override file) a create is refused 503 naming the pressure,
// then admitted again once the next heartbeat reports none.
func TestNodeMemoryAndPressureAdmission(t *testing.T) {
	dir := newDataDir(t)
	over := filepath.Join(dir, "test-memory-pressure")
	in := startServerEnv(t, dir, []string{failpoint.EnvVar + "=", mempressure.TestOverrideEnv + "=" + over}, "--memory-overcommit", "2")
	defer in.stop()

	n := in.waitLocalNode("measured", func(n nodeMemory) bool { return n.MemoryMeasured })
	if n.AvailableMiB <= 0 || n.AvailableMiB > n.MemoryTotalMiB || n.UsedMiB != n.MemoryTotalMiB-n.AvailableMiB || n.MemoryLimitMiB != 2*n.MemoryMiB || n.MemoryPressure != "" {
		t.Fatalf("the node's memory is not sane: %+v", n)
	}
	before := n.CommittedMiB
	var sb sandbox
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 384}, &sb); code != http.StatusCreated {
		t.Fatalf("create: HTTP %d", code)
	}
	defer in.delete(sb.ID)
	if n := in.localNode(); n.CommittedMiB != before+384 {
		t.Fatalf("committed %d MiB after a 384 MiB create, want %d", n.CommittedMiB, before+384)
	}
	out, errOut, code := in.cli("", "nodes", "list")
	if code != 0 || !strings.Contains(out, "COMMITTED") || !strings.Contains(out, "AVAILABLE") || !strings.Contains(out, "/"+strconv.Itoa(2*n.MemoryMiB)+" MiB") {
		t.Fatalf("space nodes list: exit %d\n%s%s", code, out, errOut)
	}

	if err := os.WriteFile(over, []byte("e2e injected pressure\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in.waitLocalNode("under pressure", func(n nodeMemory) bool { return strings.Contains(n.MemoryPressure, "e2e injected pressure") })
	var refused struct {
		Code, Reason, Message string
	}
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256}, &refused); code != http.StatusServiceUnavailable ||
		refused.Reason != "no_capacity" || !strings.Contains(refused.Message, "local: memory pressure (test override: e2e injected pressure)") {
		t.Fatalf("create under memory pressure: HTTP %d %+v, want 503 no_capacity naming the pressure", code, refused)
	}
	if out, _, _ := in.cli("", "nodes", "list"); !strings.Contains(out, "memory pressure: test override: e2e injected pressure") {
		t.Errorf("space nodes list under pressure does not show it:\n%s", out)
	}

	if err := os.Remove(over); err != nil {
		t.Fatal(err)
	}
	in.waitLocalNode("out of pressure", func(n nodeMemory) bool { return n.MemoryPressure == "" })
	var again sandbox
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256}, &again); code != http.StatusCreated {
		t.Fatalf("create once the pressure is over: HTTP %d", code)
	}
	in.delete(again.ID)
}

// TestMemoryPressureOverrideIgnoredOutsideTests: a server whose environment
// names the override file but does not set SPACE_FAILPOINTS (not a test
// process) measures memory for real and ignores the file.
func TestMemoryPressureOverrideIgnoredOutsideTests(t *testing.T) {
	if _, set := os.LookupEnv(failpoint.EnvVar); set {
		t.Skipf("%s is set in the test's environment: the server would inherit it", failpoint.EnvVar)
	}
	dir := newDataDir(t)
	over := filepath.Join(dir, "test-memory-pressure")
	if err := os.WriteFile(over, []byte("must be ignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := startServerEnv(t, dir, []string{mempressure.TestOverrideEnv + "=" + over})
	defer in.stop()
	n := in.waitLocalNode("measured", func(n nodeMemory) bool { return n.MemoryMeasured })
	// Two more heartbeats: the override would have shown by now.
	time.Sleep(5 * time.Second)
	if n = in.localNode(); strings.Contains(n.MemoryPressure, "must be ignored") {
		t.Fatalf("the override was honoured without %s: %+v", failpoint.EnvVar, n)
	}
	sb := in.create("minimal")
	in.delete(sb.ID)
}

// pressureEvent is the "idle" event memory pressure left on sandbox id, if any.
func (in *instance) pressureEvent(id string) (time.Time, string, bool) {
	in.t.Helper()
	var ev struct {
		Events []struct {
			Time    time.Time `json:"time"`
			Type    string    `json:"type"`
			Message string    `json:"message"`
		}
	}
	if code := in.do("GET", "/v1/sandboxes/"+id+"/events", nil, &ev); code != http.StatusOK {
		in.t.Fatalf("events of %s: HTTP %d", id, code)
	}
	for _, e := range ev.Events {
		if e.Type == "idle" && strings.Contains(e.Message, "memory pressure on node local") {
			return e.Time, e.Message, true
		}
	}
	return time.Time{}, "", false
}

// TestMemoryPressurePausesTheLongestIdle: under (injected) memory pressure
// the server pauses the node's idle sandboxes that have an idle timeout,
// longest idle first, one per heartbeat and ahead of their timeout, each
// with an event saying why; a sandbox without an idle timeout runs on.
func TestMemoryPressurePausesTheLongestIdle(t *testing.T) {
	dir := newDataDir(t)
	over := filepath.Join(dir, "test-memory-pressure")
	in := startServerEnv(t, dir, []string{failpoint.EnvVar + "=", mempressure.TestOverrideEnv + "=" + over})
	defer in.stop()
	create := func(body map[string]any) sandbox {
		t.Helper()
		var sb sandbox
		body["template"], body["runtime"], body["memory_mib"] = "minimal", "ns", 256
		if code := in.do("POST", "/v1/sandboxes", body, &sb); code != http.StatusCreated {
			t.Fatalf("create %v: HTTP %d", body, code)
		}
		return sb
	}
	older := create(map[string]any{"idle_timeout": "1h", "idle_action": "pause"})
	defer in.delete(older.ID)
	time.Sleep(2 * time.Second)
	newer := create(map[string]any{"idle_timeout": "1h", "idle_action": "pause"})
	defer in.delete(newer.ID)
	always := create(map[string]any{})
	defer in.delete(always.ID)
	// Both must be idle for reconcile.MinIdleUnderPressure (10 s).
	time.Sleep(12 * time.Second)

	if err := os.WriteFile(over, []byte("e2e injected pressure\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := func(id string) string {
		var sb sandbox
		in.do("GET", "/v1/sandboxes/"+id, nil, &sb)
		return sb.State
	}
	deadline := time.Now().Add(45 * time.Second)
	for state(older.ID) != "paused" || state(newer.ID) != "paused" {
		if time.Now().After(deadline) {
			t.Fatalf("under memory pressure after 45 s: older %s, newer %s, want both paused\n%s", state(older.ID), state(newer.ID), in.logs())
		}
		time.Sleep(250 * time.Millisecond)
	}
	at1, msg, ok1 := in.pressureEvent(older.ID)
	at2, _, ok2 := in.pressureEvent(newer.ID)
	if !ok1 || !ok2 || !strings.Contains(msg, "(test override: e2e injected pressure)") || !strings.Contains(msg, "idle timeout 1h0m0s") {
		t.Fatalf("pause events: older %v %q, newer %v", ok1, msg, ok2)
	}
	if !at1.Before(at2) {
		t.Errorf("the newer sandbox was paused at %s, not after the older (longest idle) at %s", at2, at1)
	}
	// Two more heartbeats under pressure: the sandbox without an idle
	// timeout is not the node's to pause.
	time.Sleep(5 * time.Second)
	if s := state(always.ID); s != "running" {
		t.Errorf("the sandbox without an idle timeout is %s under pressure, want running", s)
	}
	if _, _, ok := in.pressureEvent(always.ID); ok {
		t.Errorf("the sandbox without an idle timeout has a memory pressure event")
	}
	if err := os.Remove(over); err != nil {
		t.Fatal(err)
	}
	// A request wakes a paused one as usual.
	if res := in.exec(older.ID, "echo", "awake"); res.Stdout != "awake\n" {
		t.Errorf("exec in the sandbox paused for pressure: %+v", res)
	}
}

// TestCPUOvercommitAdmission: `space server --cpu-overcommit 1` lets the
// sandboxes' CPUs on the node sum to its CPUs and no more: a sandbox taking
// all of them is admitted, the next one-CPU create is refused 503 naming the
// committed and allowed CPUs, and admitted again once the first is deleted.
func TestCPUOvercommitAdmission(t *testing.T) {
	dir := newDataDir(t)
	in := startServerEnv(t, dir, nil, "--cpu-overcommit", "1")
	defer in.stop()
	var list struct {
		Nodes []struct {
			CPUs int `json:"cpus"`
		}
	}
	if code := in.do("GET", "/v1/nodes", nil, &list); code != http.StatusOK || len(list.Nodes) != 1 || list.Nodes[0].CPUs < 1 {
		t.Fatalf("GET /v1/nodes: HTTP %d %+v", code, list)
	}
	cpus := list.Nodes[0].CPUs
	if cpus > 16 {
		t.Skipf("the node has %d CPUs, more than one sandbox can take (16)", cpus)
	}
	var made []string // deleted before the server stops, whatever fails
	defer func() {
		for _, id := range made {
			in.deleteAll(id)
		}
	}()
	var all sandbox
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 64, "cpus": cpus}, &all); code != http.StatusCreated {
		t.Fatalf("create with %d CPUs: HTTP %d", cpus, code)
	}
	made = append(made, all.ID)
	var refused struct {
		ID, Code, Reason, Message string
	}
	want := strconv.Itoa(cpus) + " CPUs committed of " + strconv.Itoa(cpus) + " allowed (" + strconv.Itoa(cpus) + " CPUs × 1, --cpu-overcommit), 1 needed"
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 64, "cpus": 1}, &refused); code != http.StatusServiceUnavailable ||
		refused.Reason != "no_capacity" || !strings.Contains(refused.Message, want) {
		if refused.ID != "" {
			made = append(made, refused.ID)
		}
		t.Fatalf("create beyond the node's CPUs: HTTP %d %+v, want 503 no_capacity saying %q", code, refused, want)
	}
	in.delete(all.ID)
	var again sandbox
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 64, "cpus": 1}, &again); code != http.StatusCreated {
		t.Fatalf("create once the CPUs are free: HTTP %d", code)
	}
	made = append(made, again.ID)
}

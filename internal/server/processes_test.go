package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/api/guest/v1/process/processv1connect"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/sandbox"
)

// listingGuest is a guest daemon whose process.Process/List answers procs.
type listingGuest struct {
	processv1connect.UnimplementedProcessHandler
	procs []*processv1.ProcessInfo
}

func (g *listingGuest) List(context.Context, *connect.Request[processv1.ListRequest]) (*connect.Response[processv1.ListResponse], error) {
	return connect.NewResponse(&processv1.ListResponse{Processes: g.procs}), nil
}

// TestListProcessesREST: GET /v1/sandboxes/{id}/processes answers what the
// guest daemon's List (E2B's commands.list) says, by pid, without any
// process's environment; another tenant's sandbox is not found, a paused
// one is refused with the state it is in.
func TestListProcessesREST(t *testing.T) {
	p := newE2BPlane(t)
	cwd, tag := "/work", "agent"
	g := &listingGuest{procs: []*processv1.ProcessInfo{
		{Pid: 31, Config: &processv1.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l"}, Envs: map[string]string{"TOKEN": "s3cret-env-value"}}},
		{Pid: 7, Config: &processv1.ProcessConfig{Cmd: "python3", Args: []string{"-m", "http.server"}, Cwd: &cwd}, Tag: &tag},
	}}
	mux := http.NewServeMux()
	mux.Handle(processv1connect.NewProcessHandler(g))
	p.node.mu.Lock()
	p.node.guest = mux
	p.node.mu.Unlock()

	sb := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	auth := func(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }
	a := p.send("GET", "/v1/sandboxes/"+sb.ID+"/processes", "", "", auth(p.key))
	if a.status != http.StatusOK {
		t.Fatalf("GET processes = %d %s; want 200", a.status, a.body)
	}
	if strings.Contains(a.body, "s3cret-env-value") || strings.Contains(a.body, "TOKEN") {
		t.Fatalf("GET processes shows a process's environment: %s", a.body)
	}
	var got sandboxv1.ProcessList
	if err := json.Unmarshal([]byte(a.body), &got); err != nil {
		t.Fatal(err)
	}
	want := []sandboxv1.Process{
		{PID: 7, Cmd: "python3", Args: []string{"-m", "http.server"}, Cwd: "/work", Tag: "agent"},
		{PID: 31, Cmd: "/bin/bash", Args: []string{"-l"}},
	}
	if len(got.Processes) != len(want) {
		t.Fatalf("GET processes = %+v; want %+v", got.Processes, want)
	}
	for i := range want {
		w, g := want[i], got.Processes[i]
		if g.PID != w.PID || g.Cmd != w.Cmd || strings.Join(g.Args, " ") != strings.Join(w.Args, " ") || g.Cwd != w.Cwd || g.Tag != w.Tag {
			t.Fatalf("process %d = %+v; want %+v (all: %s)", i, g, w, a.body)
		}
	}

	if a := p.send("GET", "/v1/sandboxes/"+sb.ID+"/processes", "", "", auth(p.other)); a.status != http.StatusNotFound {
		t.Fatalf("another tenant's GET processes = %d %s; want 404", a.status, a.body)
	}
	paused := p.sandbox(p.tenant, sandbox.StatePaused, nil)
	if a := p.send("GET", "/v1/sandboxes/"+paused.ID+"/processes", "", "", auth(p.key)); a.status != http.StatusConflict || !strings.Contains(a.body, "paused") {
		t.Fatalf("a paused sandbox's GET processes = %d %s; want 409 naming paused", a.status, a.body)
	}
}

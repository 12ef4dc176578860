package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// benchServer is an in-memory server of the routes `space bench` uses.
type benchServer struct {
	mu        sync.Mutex // guards everything below
	seq       int
	sandboxes map[string]*sandboxv1.Sandbox
	deleted   map[string]bool
	names     map[string]bool
	files     map[string][]byte
	snapshots map[string]*sandboxv1.Snapshot
	creates   int
	inflight  int
	maxFlight int
	execs     int
	lifecycle []string
	snapPolls int

	// barrier, when set, holds each create until that many are in flight (or
	// a deadlock guard passes), so a test sees the concurrency.
	barrier  int
	failFrom int  // the create with this number (1-based) answers 503; 0: never
	corrupt  bool // reads return the file with one byte changed
	// failDeletes is how many of the first deletes answer 503.
	failDeletes int
}

func newBenchServer() *benchServer {
	return &benchServer{
		sandboxes: map[string]*sandboxv1.Sandbox{}, deleted: map[string]bool{}, names: map[string]bool{},
		files: map[string][]byte{}, snapshots: map[string]*sandboxv1.Snapshot{},
	}
}

func (s *benchServer) mux(t *testing.T) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.CreateSandboxRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Template != "minimal" || !strings.HasPrefix(req.Name, "bench-") {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, fmt.Sprintf("unexpected request %+v", req))
			return
		}
		s.mu.Lock()
		s.creates++
		n := s.creates
		s.inflight++
		s.maxFlight = max(s.maxFlight, s.inflight)
		s.mu.Unlock()
		defer func() { s.mu.Lock(); s.inflight--; s.mu.Unlock() }()
		if s.barrier > 0 && n <= s.barrier {
			deadline := time.After(20 * time.Second) // deadlock guard only
			for {
				s.mu.Lock()
				all := s.maxFlight >= s.barrier // reached once: the first to pass lowers inflight
				s.mu.Unlock()
				if all {
					break
				}
				select {
				case <-deadline:
					t.Errorf("only %d creates in flight at once, want %d", s.counts().maxFlight, s.barrier)
					writeErr(w, 503, sandboxv1.CodeUnavailable, "barrier")
					return
				case <-time.After(time.Millisecond):
				}
			}
		}
		if s.failFrom > 0 && n >= s.failFrom {
			writeErr(w, 503, sandboxv1.CodeUnavailable, "no capacity")
			return
		}
		s.mu.Lock()
		s.seq++
		sb := &sandboxv1.Sandbox{ID: fmt.Sprintf("sb-%d", s.seq), Name: req.Name, Template: req.Template, Runtime: "ns", Node: "node-a", State: sandboxv1.StateCreating}
		if s.names[req.Name] {
			t.Errorf("name %q used twice", req.Name)
		}
		s.names[req.Name] = true
		s.sandboxes[sb.ID] = sb
		out := *sb
		s.mu.Unlock()
		writeJSONResp(w, 201, out)
	})
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		var list sandboxv1.SandboxList
		for _, sb := range s.sandboxes {
			list.Sandboxes = append(list.Sandboxes, *sb)
		}
		s.mu.Unlock()
		writeJSONResp(w, 200, list)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		sb, ok := s.sandboxes[r.PathValue("id")]
		if !ok {
			writeErr(w, 404, sandboxv1.CodeNotFound, "sandbox not found")
			return
		}
		if sb.State == sandboxv1.StateCreating {
			sb.State = sandboxv1.StateRunning // running from the first poll on
		}
		writeJSONResp(w, 200, *sb)
	})
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		writeJSONResp(w, 200, sandboxv1.NodeList{Nodes: []sandboxv1.Node{
			{ID: "node-a", Live: true, Runtimes: []string{"ns"}}, {ID: "node-b", Live: true, Runtimes: []string{"ns"}},
			{ID: "node-c", Live: false, Runtimes: []string{"ns"}},
		}})
	})
	// Odd-numbered sandboxes say they claimed a prepared execution.
	mux.HandleFunc("GET /v1/sandboxes/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscanf(r.PathValue("id"), "sb-%d", &n)
		msg := "running on local (generation 1, exec x)"
		if n%2 == 1 {
			msg = "running on local (generation 1, exec x, a prepared execution from the node's warm pool)"
		}
		writeJSONResp(w, 200, sandboxv1.EventList{Events: []sandboxv1.Event{{Type: "state", Message: msg}}})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		id := r.PathValue("id")
		if _, ok := s.sandboxes[id]; !ok {
			writeErr(w, 404, sandboxv1.CodeNotFound, "sandbox not found")
			return
		}
		if s.failDeletes > 0 {
			s.failDeletes--
			writeErr(w, 503, sandboxv1.CodeUnavailable, "node busy")
			return
		}
		delete(s.sandboxes, id)
		s.deleted[id] = true
		for sid, snap := range s.snapshots { // a sandbox's snapshots go with it
			if snap.Sandbox == id {
				delete(s.snapshots, sid)
			}
		}
		w.WriteHeader(204)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.ExecRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		s.mu.Lock()
		s.execs++
		s.mu.Unlock()
		code := 0
		if len(req.Cmd) != 1 || req.Cmd[0] != "true" {
			code = 127
		}
		writeJSONResp(w, 200, sandboxv1.ExecResult{ExitCode: code})
	})
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, 101<<20))
		if err != nil {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, err.Error())
			return
		}
		s.mu.Lock()
		s.files[r.PathValue("id")+":"+r.URL.Query().Get("path")] = b
		s.mu.Unlock()
		w.WriteHeader(204)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		b, ok := s.files[r.PathValue("id")+":"+r.URL.Query().Get("path")]
		b = append([]byte(nil), b...)
		s.mu.Unlock()
		if !ok {
			writeErr(w, 404, sandboxv1.CodeNotFound, "no such file")
			return
		}
		if s.corrupt {
			b[len(b)/2] ^= 1
		}
		w.Write(b)
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		delete(s.files, r.PathValue("id")+":"+r.URL.Query().Get("path"))
		s.mu.Unlock()
		w.WriteHeader(204)
	})
	for _, op := range []struct {
		verb string
		to   sandboxv1.State
	}{{"pause", sandboxv1.StatePaused}, {"resume", sandboxv1.StateRunning},
		{"hibernate", sandboxv1.StateHibernated}, {"restore", sandboxv1.StateRunning}, {"rollback", sandboxv1.StateRunning}} {
		mux.HandleFunc("POST /v1/sandboxes/{id}/"+op.verb, func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			defer s.mu.Unlock()
			sb, ok := s.sandboxes[r.PathValue("id")]
			if !ok {
				writeErr(w, 404, sandboxv1.CodeNotFound, "sandbox not found")
				return
			}
			s.lifecycle = append(s.lifecycle, op.verb)
			sb.State = op.to
			if op.verb == "restore" {
				var req sandboxv1.RestoreRequest
				if r.ContentLength > 0 && json.NewDecoder(r.Body).Decode(&req) == nil && req.Node != "" {
					sb.Node = req.Node
					s.lifecycle[len(s.lifecycle)-1] = "restore-on-" + req.Node
				}
			}
			writeJSONResp(w, 200, *sb)
		})
	}
	mux.HandleFunc("POST /v1/sandboxes/{id}/fork", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.ForkRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !strings.HasPrefix(req.Name, "bench-") {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, fmt.Sprintf("unexpected fork %+v", req))
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.sandboxes[r.PathValue("id")]; !ok {
			writeErr(w, 404, sandboxv1.CodeNotFound, "sandbox not found")
			return
		}
		s.lifecycle = append(s.lifecycle, "fork")
		s.seq++
		child := &sandboxv1.Sandbox{ID: fmt.Sprintf("sb-%d", s.seq), Name: req.Name, Template: "minimal", State: sandboxv1.StateCreating}
		s.sandboxes[child.ID] = child
		writeJSONResp(w, 201, *child)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.CreateSnapshotRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Kind != sandboxv1.SnapshotDisk {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, "want a disk snapshot")
			return
		}
		s.mu.Lock()
		s.seq++
		snap := &sandboxv1.Snapshot{ID: fmt.Sprintf("snap-%d", s.seq), Sandbox: r.PathValue("id"), Kind: req.Kind, State: "creating"}
		s.snapshots[snap.ID] = snap
		out := *snap
		s.mu.Unlock()
		writeJSONResp(w, 202, out)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.snapPolls++
		var list sandboxv1.SnapshotList
		for _, snap := range s.snapshots {
			snap.State = "ready" // ready from the first poll on
			list.Snapshots = append(list.Snapshots, *snap)
		}
		writeJSONResp(w, 200, list)
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}/snapshots/{snap}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		delete(s.snapshots, r.PathValue("snap"))
		s.mu.Unlock()
		w.WriteHeader(204)
	})
	return mux
}

// benchCounts is what a benchServer saw.
type benchCounts struct {
	creates, deleted, left, maxFlight, execs, snapshots, snapPolls, files int
	lifecycle                                                             []string
}

// counts returns what the server saw so far.
func (s *benchServer) counts() benchCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return benchCounts{
		creates: s.creates, deleted: len(s.deleted), left: len(s.sandboxes), maxFlight: s.maxFlight,
		execs: s.execs, snapshots: len(s.snapshots), snapPolls: s.snapPolls, files: len(s.files),
		lifecycle: append([]string(nil), s.lifecycle...),
	}
}

func TestBenchCreateConcurrentDeletesAllPrintsJSON(t *testing.T) {
	s := newBenchServer()
	s.barrier = 3
	fakeServer(t, s.mux(t))
	code, out, errOut := run(t, nil, "bench", "create", "--count", "7", "--concurrency", "3", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	c := s.counts()
	if c.creates != 7 || c.deleted != 7 || c.left != 0 {
		t.Errorf("%d creates, %d deleted, %d left; want 7, 7, 0", c.creates, c.deleted, c.left)
	}
	if c.maxFlight != 3 {
		t.Errorf("at most %d creates in flight, want 3", c.maxFlight)
	}
	var got struct {
		Machine   map[string]any            `json:"machine"`
		Scenarios map[string]map[string]any `json:"scenarios"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	for _, k := range []string{"cpus", "memory_mib", "kernel", "go_version"} {
		if _, ok := got.Machine[k]; !ok {
			t.Errorf("machine lacks %q: %s", k, out)
		}
	}
	cr, ok := got.Scenarios["create"]
	if !ok || len(got.Scenarios) != 1 {
		t.Fatalf("scenarios = %v, want create alone", got.Scenarios)
	}
	for _, k := range []string{"p50_ms", "p90_ms", "p99_ms", "max_ms", "ops_per_s", "n"} {
		if _, ok := cr[k]; !ok {
			t.Errorf("create lacks %q: %s", k, out)
		}
	}
	if cr["n"] != 7.0 {
		t.Errorf("n = %v, want 7", cr["n"])
	}
	if cr["ops_per_s"].(float64) <= 0 || cr["p50_ms"].(float64) > cr["max_ms"].(float64) {
		t.Errorf("figures out of order: %v", cr)
	}
}

func TestBenchCreateFailureStopsAndCleansUp(t *testing.T) {
	s := newBenchServer()
	s.failFrom = 3
	fakeServer(t, s.mux(t))
	code, out, errOut := run(t, nil, "bench", "create", "--count", "10", "-o", "json")
	if code != 1 || out != "" {
		t.Fatalf("exit %d, stdout %q; want 1 and no figures", code, out)
	}
	if !strings.Contains(errOut, "bench create") || !strings.Contains(errOut, "create sandbox") || !strings.Contains(errOut, "no capacity") {
		t.Errorf("stderr %q does not name the failed operation", errOut)
	}
	c := s.counts()
	if c.creates != 3 || c.deleted != 2 || c.left != 0 {
		t.Errorf("%d creates, %d deleted, %d left; want 3 (stopped at the failure), 2, 0", c.creates, c.deleted, c.left)
	}
}

func TestBenchAllTable(t *testing.T) {
	s := newBenchServer()
	fakeServer(t, s.mux(t))
	code, out, errOut := run(t, nil, "bench", "all", "--count", "6")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	want := []string{"create 6", "exec 6", "files_write_1mib 6", "files_read_1mib 6", "files_write_100mib 3", "files_read_100mib 3", "pause 6", "resume 6", "snapshot_disk 5",
		"hibernate 3", "restore 3", "restore_other_node 3", "fork 3", "rollback 3"}
	if len(lines) != len(want)+3 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "SCENARIO") {
		t.Fatalf("table = %q", out)
	}
	// The create setting up the shared sandbox is not timed: 3 of the 6
	// timed ones are odd-numbered.
	if note := lines[len(lines)-2]; note != "create: 3 of 6 from a warm pool" {
		t.Errorf("note line = %q", note)
	}
	for i, w := range want {
		f := strings.Fields(lines[i+1])
		if len(f) != 9 || strings.Join(f[:2], " ") != w {
			t.Errorf("row %d = %q, want %q and 9 columns", i+1, lines[i+1], w)
		}
		// The fake server runs on this host: every row has the machine's CPU.
		if _, err := strconv.ParseFloat(f[8], 64); err != nil {
			t.Errorf("row %q: CPU ms/op %q is not a number", lines[i+1], f[8])
		}
		if isFiles := strings.HasPrefix(w, "files"); isFiles == (f[7] == "-") {
			t.Errorf("row %q: MiB/s %q", lines[i+1], f[7])
		}
	}
	c := s.counts()
	wantOps := strings.Repeat("pause resume ", 6) + strings.Repeat("hibernate restore ", 3) +
		"hibernate restore-on-node-b hibernate restore-on-node-a hibernate restore-on-node-b " + "fork fork fork rollback rollback rollback"
	if c.execs != 6 || strings.Join(c.lifecycle, " ") != wantOps {
		t.Errorf("%d execs, lifecycle %v; want 6 and %s", c.execs, c.lifecycle, wantOps)
	}
	if c.snapshots != 0 || c.snapPolls < 5 {
		t.Errorf("%d snapshots left after %d polls; want none, after waiting for each", c.snapshots, c.snapPolls)
	}
	if c.left != 0 || c.deleted != 10 || c.files != 0 {
		t.Errorf("%d sandboxes and %d files left, %d deleted; want 0, 0 and 10 (6 created + 1 shared + 3 forks)", c.left, c.files, c.deleted)
	}
}

func TestBenchFilesWrongBytesIsAnError(t *testing.T) {
	s := newBenchServer()
	s.corrupt = true
	fakeServer(t, s.mux(t))
	code, out, errOut := run(t, nil, "bench", "files", "--count", "3", "-o", "json")
	if code != 1 || out != "" {
		t.Fatalf("exit %d, stdout %q; want 1 and no figures", code, out)
	}
	if !strings.Contains(errOut, "bench files") || !strings.Contains(errOut, "differs from what was written") || !strings.Contains(errOut, "round 1 of 3") {
		t.Errorf("stderr %q does not report the mismatch", errOut)
	}
	if c := s.counts(); c.left != 0 {
		t.Errorf("%d sandboxes left after the failure", c.left)
	}
}

// TestFileCheck: the files scenario's check finds the first byte that
// differs wherever it falls in the writes, and a read that is shorter or
// longer than what was written.
func TestFileCheck(t *testing.T) {
	want := bytes.Repeat([]byte("0123456789"), 100)
	flip := func(i int) []byte {
		b := bytes.Clone(want)
		b[i] ^= 1
		return b
	}
	tests := []struct {
		name    string
		got     []byte
		chunk   int
		wantErr string
	}{
		{"same", want, 7, ""},
		{"same, one write", want, len(want), ""},
		{"first byte", flip(0), 64, "byte 0 differs"},
		{"across writes", flip(513), 64, "byte 513 differs"},
		{"last byte", flip(999), 1000, "byte 999 differs"},
		{"short", want[:999], 64, "got 999 bytes, wrote 1000"},
		{"long", append(bytes.Clone(want), 'x'), 64, "got 1001 bytes, wrote 1000"},
		{"empty", nil, 64, "got 0 bytes, wrote 1000"},
	}
	for _, tt := range tests {
		c := &fileCheck{want: want}
		for got := tt.got; len(got) > 0; {
			n := min(tt.chunk, len(got))
			if k, err := c.Write(got[:n]); k != n || err != nil {
				t.Fatalf("%s: Write = %d, %v", tt.name, k, err)
			}
			got = got[n:]
		}
		err := c.result()
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s: result() = %v; want %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestBenchUsage(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "missing SCENARIO"},
		{[]string{"bench", "boot"}, `scenario "boot"`},
		{[]string{"bench", "create", "--count", "0"}, "--count 0"},
		{[]string{"bench", "create", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{"bench", "exec", "--runtime", "xen"}, "want vm or ns"},
		{[]string{"bench", "sustained", "--clients", "0"}, "--clients 0"},
		{[]string{"bench", "sustained", "--duration", "0s"}, "--duration 0s"},
		{[]string{"bench", "create", "--machine-cpu", "maybe"}, `--machine-cpu "maybe"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, errOut := run(t, nil, tt.args...)
			if code != 2 || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut, tt.want)
			}
		})
	}
}

package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// fakeAPI is a stand-in SPACE API for this package's unit tests: it
// records what the tools sent and answers a few routes.
type fakeAPI struct {
	mu       sync.Mutex
	requests []string // "METHOD PATH key"
	execs    []sandboxv1.ExecRequest
	codes    []sandboxv1.CodeRequest
	srv      *httptest.Server
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.ExecRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.execs = append(f.execs, req)
		f.mu.Unlock()
		json.NewEncoder(w).Encode(sandboxv1.ExecResult{ExitCode: 3, Stdout: "out:" + strings.Join(req.Cmd, " "), Stderr: "err"})
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/code", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.CodeRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.codes = append(f.codes, req)
		f.mu.Unlock()
		enc := json.NewEncoder(w)
		for _, ev := range []sandboxv1.CodeEvent{
			{Type: sandboxv1.CodeEventStdout, Text: "one\n"},
			{Type: sandboxv1.CodeEventStderr, Text: "warn\n"},
			{Type: sandboxv1.CodeEventStdout, Text: "two\n"},
			{Type: sandboxv1.CodeEventResult, Result: &sandboxv1.CodeResult{Main: true, Text: "42", JSON: json.RawMessage(`{"a":1}`)}},
			{Type: sandboxv1.CodeEventError, Error: &sandboxv1.CodeError{Name: "ValueError", Value: "bad", Traceback: "tb"}},
			{Type: sandboxv1.CodeEventExecutionCount, ExecutionCount: 4},
			{Type: sandboxv1.CodeEventEnd},
		} {
			enc.Encode(ev)
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(map[string]string{"code": "not_found", "message": "sandbox " + r.PathValue("id") + " not found"})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte{0xff, 0xfe, 'x'})
	})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.Path+" "+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// connect connects an in-memory MCP client to the stdio server of cfg.
func connect(t *testing.T, cfg Config) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := t.Context()
	ss, err := NewServer(cfg).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestTheToolList(t *testing.T) {
	cs := connect(t, Config{APIURL: "http://127.0.0.1:1", Key: "k"})
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema == nil {
			t.Errorf("tool %s has no description or input schema", tool.Name)
		}
	}
	slices.Sort(names)
	want := []string{"code_context_create", "code_context_delete", "code_context_list", "code_context_restart",
		"file_list", "file_read", "file_write", "port_expose", "run_code", "run_command", "sandbox_create", "sandbox_delete",
		"sandbox_fork", "sandbox_get", "sandbox_hibernate", "sandbox_list", "sandbox_pause", "sandbox_restore", "sandbox_resume",
		"snapshot_create", "snapshot_list"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
}

func TestRunCommandUsesTheKeyAndTheShell(t *testing.T) {
	f := newFakeAPI(t)
	cs := connect(t, Config{APIURL: f.srv.URL, Key: "space_k-abc"})
	res := call(t, cs, "run_command", map[string]any{"id": "sb1", "command": "echo hi", "timeout": "5s"})
	if res.IsError {
		t.Fatalf("run_command: %s", text(res))
	}
	var out RunResult
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	if out.ExitCode != 3 || out.Stdout != "out:sh -c echo hi" || out.Stderr != "err" {
		t.Fatalf("result %+v", out)
	}
	if got := f.sent(); len(got) != 1 || got[0] != "POST /v1/sandboxes/sb1/exec space_k-abc" {
		t.Fatalf("sent %v", got)
	}
	if f.execs[0].Timeout != "5s" {
		t.Fatalf("exec request %+v", f.execs[0])
	}
}

// TestBadArgumentsAreRefusedBeforeSending: a tool error naming the field,
// and nothing sent to the API.
func TestBadArgumentsAreRefusedBeforeSending(t *testing.T) {
	f := newFakeAPI(t)
	cs := connect(t, Config{APIURL: f.srv.URL, Key: "k"})
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"run_command", map[string]any{"id": "", "command": "true"}, "argument id"},
		{"run_command", map[string]any{"command": "true"}, `missing properties: ["id"]`},
		{"run_command", map[string]any{"id": "sb"}, "argument command"},
		{"run_command", map[string]any{"id": "sb", "command": "x", "argv": []string{"y"}}, "argument argv"},
		{"run_command", map[string]any{"id": "sb", "command": "x", "timeout": "soon"}, "argument timeout"},
		{"file_read", map[string]any{"id": "sb", "path": "etc/passwd"}, "argument path"},
		{"file_write", map[string]any{"id": "sb", "path": "/x", "content": "!!", "encoding": "base64"}, "argument content"},
		{"file_write", map[string]any{"id": "sb", "path": "/x", "content": "a", "encoding": "latin1"}, "argument encoding"},
		{"file_list", map[string]any{"id": "sb", "path": "/", "depth": 99}, "argument depth"},
		{"port_expose", map[string]any{"id": "sb", "port": 70000}, "argument port"},
		{"snapshot_create", map[string]any{"id": "sb", "kind": "memory"}, "argument kind"},
		{"sandbox_create", map[string]any{"runtime": "docker"}, "argument runtime"},
		{"sandbox_delete", map[string]any{"id": " "}, "argument id"},
		{"run_code", map[string]any{"id": "sb", "code": ""}, "argument code"},
		{"run_code", map[string]any{"id": "", "code": "1"}, "argument id"},
		{"run_code", map[string]any{"id": "sb", "code": "1", "language": "python", "context": "c"}, "argument context"},
		{"run_code", map[string]any{"id": "sb", "code": "1", "timeout": "-1s"}, "argument timeout"},
		{"code_context_create", map[string]any{"id": ""}, "argument id"},
		{"code_context_create", map[string]any{"id": "sb", "language": "ruby"}, "argument language"},
		{"code_context_create", map[string]any{"id": "sb", "cwd": "tmp"}, "argument cwd"},
		{"code_context_list", map[string]any{"id": " "}, "argument id"},
		{"code_context_restart", map[string]any{"id": "sb", "context": ""}, "argument context"},
		{"code_context_delete", map[string]any{"id": "", "context": "c"}, "argument id"},
		{"code_context_delete", map[string]any{"id": "sb", "context": " "}, "argument context"},
	} {
		res := call(t, cs, c.tool, c.args)
		if !res.IsError || !strings.Contains(text(res), c.want) {
			t.Errorf("%s %v: error %v %q, want a tool error naming %q", c.tool, c.args, res.IsError, text(res), c.want)
		}
	}
	if got := f.sent(); len(got) != 0 {
		t.Fatalf("bad arguments reached the API: %v", got)
	}
	// An argument of the wrong type is the schema's refusal.
	if res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"id": 5}}); err == nil && !res.IsError {
		t.Fatal("an id of the wrong type was accepted")
	}
}

func TestAPIErrorsAreToolErrors(t *testing.T) {
	f := newFakeAPI(t)
	cs := connect(t, Config{APIURL: f.srv.URL, Key: "k"})
	res := call(t, cs, "sandbox_get", map[string]any{"id": "nope"})
	if !res.IsError || text(res) != "not_found: sandbox nope not found" {
		t.Fatalf("sandbox_get of a missing sandbox: %v %q", res.IsError, text(res))
	}
	// Not UTF-8: base64.
	res = call(t, cs, "file_read", map[string]any{"id": "sb", "path": "/bin/x"})
	if res.IsError {
		t.Fatal(text(res))
	}
	var fc FileContent
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &fc)
	if fc.Encoding != "base64" || fc.Content != "//54" || fc.Size != 3 {
		t.Fatalf("binary file: %+v", fc)
	}
}

func TestStdioWithoutAKey(t *testing.T) {
	f := newFakeAPI(t)
	cs := connect(t, Config{APIURL: f.srv.URL})
	res := call(t, cs, "sandbox_list", nil)
	if !res.IsError || !strings.Contains(text(res), "SPACE_API_KEY") {
		t.Fatalf("no key: %v %q", res.IsError, text(res))
	}
}

// keyTransport adds an API key to every request.
type keyTransport struct{ key *string }

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if *k.key != "" {
		r.Header.Set("Authorization", "Bearer "+*k.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestHTTPTakesEachRequestsKey: over HTTP the tools use the key of the
// request; a request without one is 401, and a session opened with one key
// cannot be used with another.
func TestHTTPTakesEachRequestsKey(t *testing.T) {
	f := newFakeAPI(t)
	h := httptest.NewServer(HTTPHandler(Config{APIURL: f.srv.URL, Key: "the-servers-own-key-is-never-used"}))
	defer h.Close()

	resp, err := http.Post(h.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no key: HTTP %d, want 401", resp.StatusCode)
	}

	key := "space_k-tenant-a"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tr := &mcp.StreamableClientTransport{Endpoint: h.URL, HTTPClient: &http.Client{Transport: keyTransport{&key}}, DisableStandaloneSSE: true}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"id": "sb1", "argv": []string{"true"}}})
	if err != nil || res.IsError {
		t.Fatalf("run_command over HTTP: %v %v", err, res)
	}
	if got := f.sent(); len(got) != 1 || got[0] != "POST /v1/sandboxes/sb1/exec space_k-tenant-a" {
		t.Fatalf("sent %v, want the request's own key", got)
	}

	// The same session with another key: refused before any tool runs.
	body := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"sandbox_list","arguments":{}}}`
	req, _ := http.NewRequest("POST", h.URL, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Authorization", "Bearer space_k-tenant-b")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another key on the session: HTTP %d, want 403", resp.StatusCode)
	}
	if got := f.sent(); len(got) != 1 {
		t.Fatalf("the other key's request reached the API: %v", got)
	}
}

func TestSessionBindings(t *testing.T) {
	b := &bindings{keys: map[string]binding{}}
	a, other := [32]byte{1}, [32]byte{2}
	if b.bind("s1", a) != bound || b.bind("s1", a) != bound || b.bind("s1", other) != otherKey {
		t.Fatal("a session is its first key's")
	}
	b.forget("s1")
	if b.bind("s1", other) != bound {
		t.Fatal("a closed session's id is free again")
	}
	for i := range maxSessions - 1 {
		b.keys[string(rune(i))+"x"] = binding{a, time.Now()}
	}
	if b.bind("new", a) != full {
		t.Fatal("past maxSessions: a new session was bound")
	}
	// Idle ones make room; active ones are never dropped.
	for sid, cur := range b.keys {
		if sid != "s1" {
			cur.used = time.Now().Add(-2 * sessionIdle)
			b.keys[sid] = cur
			break
		}
	}
	if b.bind("new", a) != bound || b.bind("s1", a) != otherKey {
		t.Fatal("an idle session did not make room, or an active one was dropped")
	}
}

// TestRunCodeStreamsProgress: run_code's stdout and stderr reach a client
// that sent a progress token as progress notifications, in order, and the
// result carries the execution.
func TestRunCodeStreamsProgress(t *testing.T) {
	f := newFakeAPI(t)
	ct, st := mcp.NewInMemoryTransports()
	ss, err := NewServer(Config{APIURL: f.srv.URL, Key: "space_k-abc"}).Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	var mu sync.Mutex
	var progress []string
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			if req.Params.ProgressToken == "tok-1" {
				progress = append(progress, req.Params.Message)
			}
		},
	}).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"id": "sb1", "code": "print(1)", "language": "python", "timeout": "5s", "env": map[string]string{"A": "b"}}}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(t.Context(), params)
	if err != nil {
		t.Fatalf("run_code: protocol error %v", err)
	}
	if res.IsError {
		t.Fatalf("run_code: %s", text(res))
	}
	var out CodeResult
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Text != "42" || out.Stdout != "one\ntwo\n" || out.Stderr != "warn\n" || out.ExecutionCount != 4 ||
		out.Error == nil || out.Error.Name != "ValueError" || len(out.Results) != 1 || !reflect.DeepEqual(out.Results[0].JSON, map[string]any{"a": 1.0}) {
		t.Fatalf("result %s", b)
	}
	if f.codes[0].Timeout != "5s" || f.codes[0].Language != "python" || f.codes[0].Env["A"] != "b" {
		t.Fatalf("code request %+v", f.codes[0])
	}
	// Notifications may trail the result by a moment.
	want := []string{"stdout: one\n", "stderr: warn\n", "stdout: two\n"}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := slices.Clone(progress)
		mu.Unlock()
		if slices.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("progress %q, want %q", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Without a token no notification is sent and the result is the same.
	res = call(t, cs, "run_code", map[string]any{"id": "sb1", "code": "print(1)"})
	if res.IsError {
		t.Fatalf("run_code without a token: %s", text(res))
	}
}

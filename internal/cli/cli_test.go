package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

const testKey = "sk-cli-test"

// fakeServer serves mux behind an API key check and points the CLI at it.
func fakeServer(t *testing.T, mux *http.ServeMux) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testKey {
			writeErr(w, 401, sandboxv1.CodeUnauthenticated, "missing or bad API key")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("SPACE_API_URL", srv.URL)
	t.Setenv("SPACE_API_KEY", testKey)
}

func writeJSONResp(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSONResp(w, status, sandboxv1.Error{Code: code, Message: msg})
}

// run calls Main and returns its exit code, stdout and stderr.
func run(t *testing.T, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	var out, errOut bytes.Buffer
	code := Main(args, stdin, &out, &errOut, nil)
	return code, out.String(), errOut.String()
}

var created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func sandboxMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.CreateSandboxRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Template != "minimal" || req.Env["A"] != "1=2" || req.Timeout != "30m" {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, "unexpected request")
			return
		}
		writeJSONResp(w, 201, sandboxv1.Sandbox{ID: "sb-new", State: sandboxv1.StateRunning, Template: req.Template})
	})
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		writeJSONResp(w, 200, sandboxv1.SandboxList{Sandboxes: []sandboxv1.Sandbox{
			{ID: "sb-1", State: "running", Template: "base", Runtime: "ns", Node: "n1", CreatedAt: created},
			{ID: "sb-2\x1b[2J", State: "paused", Template: "minimal", Runtime: "ns", Node: "n1", CreatedAt: created},
		}})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "sb-1" {
			writeErr(w, 404, sandboxv1.CodeNotFound, "sandbox "+r.PathValue("id")+" not found")
			return
		}
		writeJSONResp(w, 200, sandboxv1.Sandbox{ID: "sb-1", State: "running", Template: "base", Runtime: "ns", Generation: 3, Node: "n1", CreatedAt: created})
	})
	return mux
}

func TestSandboxCreatePrintsIDAlone(t *testing.T) {
	fakeServer(t, sandboxMux())
	code, out, errOut := run(t, nil, "sandbox", "create", "--template", "minimal", "--env", "A=1=2", "--timeout", "30m")
	if code != 0 || out != "sb-new\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and the id alone", code, out, errOut)
	}
}

func TestSandboxGetJSONWithFlagAfterID(t *testing.T) {
	fakeServer(t, sandboxMux())
	code, out, errOut := run(t, nil, "sandbox", "get", "sb-1", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	for _, k := range []string{"id", "state", "template", "runtime", "generation", "node", "created_at"} {
		if _, ok := got[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, out)
		}
	}
}

func TestSandboxListTable(t *testing.T) {
	fakeServer(t, sandboxMux())
	code, out, errOut := run(t, nil, "sandbox", "list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "ID STATE TEMPLATE RUNTIME NODE CREATED" {
		t.Fatalf("table = %q", out)
	}
	if got := strings.Join(strings.Fields(lines[1]), " "); got != "sb-1 running base ns n1 2026-01-02T03:04:05Z" {
		t.Errorf("row = %q", got)
	}
	if strings.ContainsRune(out, 0x1b) {
		t.Errorf("an escape sequence from the server reached the terminal: %q", out)
	}
}

func TestExitCodesAndErrors(t *testing.T) {
	fakeServer(t, sandboxMux())
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"no args", nil, 2, "usage: space"},
		{"unknown verb", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"missing subcommand", []string{"sandbox"}, 2, "missing or unknown subcommand"},
		{"missing id", []string{"sandbox", "get"}, 2, "missing ID"},
		{"extra arg", []string{"sandbox", "get", "a", "b"}, 2, `unexpected argument "b"`},
		{"unknown flag", []string{"sandbox", "list", "--bogus"}, 2, "flag provided but not defined"},
		{"bad output", []string{"sandbox", "list", "-o", "yaml"}, 2, "want text or json"},
		{"bad runtime", []string{"sandbox", "create", "--runtime", "xen"}, 2, "want vm or ns"},
		{"bad build runtime", []string{"template", "build", "t", "--dockerfile", "Dockerfile", "--build-runtime", "xen"}, 2, `--build-runtime "xen": want vm or ns`},
		{"build runtime without a dockerfile", []string{"template", "build", "t", "--from", "/srv/tree", "--build-runtime", "vm"}, 2, "go with --dockerfile"},
		{"exec without command", []string{"exec", "sb-1"}, 2, "missing CMD"},
		{"run without code", []string{"run", "--sandbox", "sb-1"}, 2, "missing CODE"},
		{"run in a sandbox and a template", []string{"run", "--sandbox", "sb-1", "--template", "t", "1"}, 2, "not both"},
		{"run with a negative timeout", []string{"run", "--sandbox", "sb-1", "--timeout", "-1s", "1"}, 2, "positive duration"},
		{"not found", []string{"sandbox", "get", "sb-9"}, 1, "space: sandbox sb-9 not found\n"},
		{"server refuses op", []string{"sandbox", "pause", "sb-1"}, 1, "space: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := run(t, nil, tt.args...)
			if code != tt.wantCode || !strings.Contains(errOut, tt.wantStderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, tt.wantCode, tt.wantStderr)
			}
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	code, out, _ := run(t, nil, "sandbox", "create", "-h")
	if code != 0 || !strings.Contains(out, "-template") {
		t.Errorf("exit %d, stdout %q; want 0 and the flags", code, out)
	}
}

func TestAPIKeyFromDataDir(t *testing.T) {
	fakeServer(t, sandboxMux())
	dir := t.TempDir()
	t.Setenv("SPACE_API_KEY", "")
	t.Setenv("SPACE_DATA_DIR", dir)
	code, _, errOut := run(t, nil, "sandbox", "list")
	if code != 1 || !strings.Contains(errOut, "no API key") || !strings.Contains(errOut, filepath.Join(dir, "admin.key")) {
		t.Errorf("without a key: exit %d, stderr %q; want 1 and a hint naming admin.key", code, errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, "admin.key"), []byte(testKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(t, nil, "sandbox", "list"); code != 0 {
		t.Errorf("with DATA/admin.key: exit %d, stderr %q", code, errOut)
	}
}

func TestLifecycleWaitsForTargetState(t *testing.T) {
	var polls atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/hibernate", func(w http.ResponseWriter, r *http.Request) {
		writeJSONResp(w, 200, sandboxv1.Sandbox{ID: "sb-1", State: sandboxv1.StateHibernating})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		state := sandboxv1.StateHibernating
		if polls.Add(1) >= 2 {
			state = sandboxv1.StateHibernated
		}
		writeJSONResp(w, 200, sandboxv1.Sandbox{ID: "sb-1", State: state})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	fakeServer(t, mux)
	code, out, errOut := run(t, nil, "sandbox", "hibernate", "sb-1")
	if code != 0 || out != "" || polls.Load() != 2 {
		t.Fatalf("exit %d, stdout %q, stderr %q after %d polls; want 0, nothing, 2 polls", code, out, errOut, polls.Load())
	}
	code, _, errOut = run(t, nil, "sandbox", "delete", "sb-1", "--wait", "200ms")
	if code != 1 || !strings.Contains(errOut, "deadline") {
		t.Errorf("delete of a sandbox that never goes away: exit %d, stderr %q; want 1 and a deadline", code, errOut)
	}
}

func TestTenantAndKeyCreatePrintSecretAlone(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tenants", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.CreateTenantRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		writeJSONResp(w, 201, sandboxv1.CreateTenantResponse{Tenant: sandboxv1.Tenant{ID: "t-1", Name: req.Name}, Key: "sk-tenant-" + req.Name})
	})
	mux.HandleFunc("POST /v1/keys", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.CreateKeyRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		secret := "sk-for-" + req.Tenant
		if req.E2B {
			secret = "e2b-for-" + req.Tenant
		}
		writeJSONResp(w, 201, sandboxv1.CreateKeyResponse{Key: sandboxv1.APIKey{ID: "k-1", Tenant: req.Tenant}, Secret: secret})
	})
	mux.HandleFunc("DELETE /v1/keys/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "k-1" {
			writeErr(w, 404, sandboxv1.CodeNotFound, "no key "+r.PathValue("id"))
			return
		}
		w.WriteHeader(204)
	})
	fakeServer(t, mux)
	if code, out, errOut := run(t, nil, "tenant", "create", "acme"); code != 0 || out != "sk-tenant-acme\n" {
		t.Errorf("tenant create: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, errOut := run(t, nil, "key", "create", "--tenant", "t-1"); code != 0 || out != "sk-for-t-1\n" {
		t.Errorf("key create: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, errOut := run(t, nil, "key", "create", "--e2b", "--tenant", "t-1"); code != 0 || out != "e2b-for-t-1\n" {
		t.Errorf("key create --e2b: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := run(t, nil, "key", "revoke", "k-1"); code != 0 {
		t.Errorf("key revoke: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run(t, nil, "key", "revoke", "k-2"); code != 1 || errOut != "space: no key k-2\n" {
		t.Errorf("key revoke unknown: exit %d, stderr %q", code, errOut)
	}
}

func TestTemplateBuildShowsProgressAndWaits(t *testing.T) {
	dir := t.TempDir()
	var from string
	var polls atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/templates", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.BuildTemplateRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		from = req.From
		writeJSONResp(w, 202, sandboxv1.Template{Name: req.Name, Source: req.From, State: "building"})
	})
	mux.HandleFunc("GET /v1/templates", func(w http.ResponseWriter, r *http.Request) {
		state := "building"
		if polls.Add(1) >= 3 {
			state = "ready"
		}
		writeJSONResp(w, 200, sandboxv1.TemplateList{Templates: []sandboxv1.Template{{Name: "other", State: "ready"}, {Name: "mine", State: state, SizeBytes: 3 << 20}}})
	})
	fakeServer(t, mux)
	code, out, errOut := run(t, nil, "template", "build", "mine", "--from", dir)
	if code != 0 || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if from != "dir:"+dir {
		t.Errorf("source sent = %q, want dir:%s", from, dir)
	}
	if !strings.Contains(errOut, "template mine: building") || !strings.Contains(errOut, "template mine ready (3.0 MiB") {
		t.Errorf("progress = %q", errOut)
	}
	if code, _, errOut := run(t, nil, "template", "build", "x", "--from", filepath.Join(dir, "missing")); code != 1 || !strings.Contains(errOut, "debootstrap:") {
		t.Errorf("missing source: exit %d, stderr %q", code, errOut)
	}
}

func TestTemplateListShowsProgress(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/templates", func(w http.ResponseWriter, r *http.Request) {
		writeJSONResp(w, 200, sandboxv1.TemplateList{Templates: []sandboxv1.Template{
			{Name: "ready", State: "ready", Progress: &sandboxv1.Progress{Phase: "build", Done: 9, Total: 9, Unit: "steps", Final: true}},
			{Name: "steps", State: "building", Progress: &sandboxv1.Progress{Phase: "build", Done: 250, Total: 1000, Unit: "steps"}},
			{Name: "bytes", State: "building", Progress: &sandboxv1.Progress{Phase: "upload", Done: 1 << 20, Total: 4 << 20, Unit: "bytes"}},
			{Name: "unknown", State: "building"},
			{Name: "broken", State: "failed", Reason: "debootstrap: exit 1\x1b[2J " + strings.Repeat("x", 100)},
		}})
	})
	fakeServer(t, mux)
	code, out, errOut := run(t, nil, "template", "list")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.HasSuffix(lines[0], "PROGRESS") {
		t.Fatalf("output:\n%s", out)
	}
	for i, want := range []string{" -", "build 25% (250/1000 steps)", "upload 25% (1.0 MiB of 4.0 MiB)", " -", "debootstrap: exit 1?[2J xxx"} {
		if !strings.Contains(lines[i+1], want) {
			t.Errorf("row %d = %q, want it to contain %q", i+1, lines[i+1], want)
		}
	}
	if strings.Contains(out, "\x1b") || strings.Count(lines[5], "x") > 60 {
		t.Errorf("a failed build's reason is not made printable and short: %q", lines[5])
	}
}

func TestExtraVerbs(t *testing.T) {
	var got []string
	extra := map[string]func([]string) int{"server": func(args []string) int { got = args; return 3 }}
	var out, errOut bytes.Buffer
	if code := Main([]string{"server", "--dev"}, strings.NewReader(""), &out, &errOut, extra); code != 3 || len(got) != 1 || got[0] != "--dev" {
		t.Errorf("extra verb: exit %d, args %q", code, got)
	}
	Main(nil, strings.NewReader(""), &out, &errOut, extra)
	if !strings.Contains(errOut.String(), "server") {
		t.Errorf("usage does not mention the extra verb: %q", errOut.String())
	}
}

func FuzzPrintable(f *testing.F) {
	f.Add("plain")
	f.Add("\x1b[2J\x07\u202e\xff\xfe")
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range printable(s) {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == unicode.ReplacementChar {
				t.Fatalf("printable(%q) kept %U", s, r)
			}
		}
	})
}

func FuzzParseArgs(f *testing.F) {
	f.Add("sb-1\x00-o\x00json\x00--\x00ls\x00-la")
	f.Add("--env\x00A=B\x00--tty\x00id")
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		fs := newFlags("fuzz")
		env := kvFlag{}
		fs.Var(env, "env", "")
		fs.Bool("tty", false, "")
		out := outputFlag(fs)
		pos, err := parseArgs(fs, args)
		if err != nil {
			return
		}
		if *out != "text" && *out != "json" {
			t.Fatalf("-o accepted %q", *out)
		}
		if len(pos) > len(args) {
			t.Fatalf("%d positionals from %d args", len(pos), len(args))
		}
		for k := range env {
			if k == "" {
				t.Fatal("empty env key accepted")
			}
		}
	})
}

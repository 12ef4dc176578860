package e2bapi

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/imagebuild"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// openBuildStore is a real SQLite store in the test's directory.
func openBuildStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// templatesBackend is an imagebuild.Backend whose builds run: every exec
// exits 0, except a RUN of "false"; it keeps the templates it built and
// deletes those no sandbox uses (inUse).
type templatesBackend struct {
	mu        sync.Mutex // guards the fields below
	templates map[string]bool
	inUse     map[string]bool
	sandboxes int
	deleted   []string
}

func newTemplatesBackend(names ...string) *templatesBackend {
	b := &templatesBackend{templates: map[string]bool{}, inUse: map[string]bool{}}
	for _, n := range names {
		b.templates[n] = true
	}
	return b
}

// backendDeleted is what b deleted so far.
func backendDeleted(b *templatesBackend) []string {
	_, deleted := b.state()
	return deleted
}

// setInUse says whether a sandbox uses template name.
func (b *templatesBackend) setInUse(name string, used bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inUse[name] = used
}

// state is the backend's templates and deletions so far, copied under its
// lock (a build's pruning deletes in its own goroutine).
func (b *templatesBackend) state() (map[string]bool, []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.templates), slices.Clone(b.deleted)
}

// awaitState returns the backend's state once ok holds of it, or after 10 s
// the last one: a build's status says ready before its pruning of the
// templates it replaced has ended (runBuild).
func (b *templatesBackend) awaitState(ok func(map[string]bool, []string) bool) (map[string]bool, []string) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		tpls, deleted := b.state()
		if ok(tpls, deleted) || time.Now().After(deadline) {
			return tpls, deleted
		}
	}
}

func (b *templatesBackend) TemplateTaken(_ context.Context, name string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.templates[name], nil
}
func (b *templatesBackend) CreateSandbox(context.Context, sandboxv1.CreateSandboxRequest) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sandboxes++
	return fmt.Sprintf("sb%d", b.sandboxes), nil
}
func (b *templatesBackend) ForkSandbox(context.Context, string, string, string) (string, error) {
	return "", errors.New("no fork")
}
func (b *templatesBackend) DeleteSandbox(context.Context, string) error { return nil }
func (b *templatesBackend) Exec(_ context.Context, _ string, start sandboxv1.ExecStart, _, _ io.Writer) (int, error) {
	if strings.Join(start.Cmd, " ") == "/bin/sh -c false" {
		return 1, nil
	}
	return 0, nil
}
func (b *templatesBackend) WriteFile(context.Context, string, string, io.Reader) error { return nil }
func (b *templatesBackend) Snapshot(context.Context, string, string) (string, error) {
	return "sn-1", nil
}
func (b *templatesBackend) DeleteSnapshot(context.Context, string, string) error { return nil }
func (b *templatesBackend) BuildTemplate(_ context.Context, req sandboxv1.BuildTemplateRequest) (*sandboxv1.Template, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.templates[req.Name] = true
	return &sandboxv1.Template{Name: req.Name, State: "ready"}, nil
}
func (b *templatesBackend) DeleteTemplate(_ context.Context, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inUse[name] {
		return fmt.Errorf("%w: template %s: still used by sandboxes", errdefs.ErrConflict, name)
	}
	delete(b.templates, name)
	b.deleted = append(b.deleted, name)
	return nil
}

// buildHost is a Host whose caller is c and whose builds run on backend.
type buildHost struct {
	statusHost
	c       *service.Caller
	backend imagebuild.Backend
}

func (h buildHost) Caller(context.Context) service.Caller                  { return *h.c }
func (h buildHost) BuildBackend(*http.Request) (imagebuild.Backend, error) { return h.backend, nil }
func (h buildHost) Authenticate(next http.HandlerFunc) http.HandlerFunc    { return next }
func (h buildHost) Instrument(_ string, next http.Handler) http.Handler    { return next }

// buildAPI is an API over st whose builds run on backend, as caller c;
// its files directory does not exist yet (no upload made it).
func buildAPI(t *testing.T, st store.TemplateBuilds, backend imagebuild.Backend, c *service.Caller) *API {
	a := New(Config{Host: buildHost{c: c, backend: backend}, TokenKey: []byte("k"), FilesDir: filepath.Join(t.TempDir(), "files"), Builds: st,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(a.StopBuilds)
	return a
}

// e2bDo serves one request of pattern on a's mux and decodes the answer.
func e2bDo(t *testing.T, a *API, method, path, body string) (int, map[string]any) {
	t.Helper()
	mux := http.NewServeMux()
	a.Register(mux)
	r := httptest.NewRequest(method, PathPrefix+path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	var out map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &out)
	if out == nil {
		out = map[string]any{"body": w.Body.String()}
	}
	return w.Code, out
}

// buildAndWait requests a build of name with steps, starts it and waits
// for its end; it returns the build id and its final status answer.
func buildAndWait(t *testing.T, a *API, name, request, steps string) (string, map[string]any) {
	t.Helper()
	code, out := e2bDo(t, a, "POST", "/v3/templates", request)
	if code != http.StatusAccepted {
		t.Fatalf("request a build of %s: %d %v", name, code, out)
	}
	id := out["buildID"].(string)
	if code, out := e2bDo(t, a, "POST", "/v2/templates/"+name+"/builds/"+id, `{"fromTemplate":"minimal","steps":`+steps+`}`); code != http.StatusAccepted {
		t.Fatalf("start build %s: %d %v", id, code, out)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		code, out := e2bDo(t, a, "GET", "/templates/"+name+"/builds/"+id+"/status", "")
		if code != http.StatusOK {
			t.Fatalf("status of %s: %d %v", id, code, out)
		}
		if s := out["status"]; s == buildReady || s == buildError {
			return id, out
		}
	}
	t.Fatalf("build %s did not end", id)
	return "", nil
}

// TestRebuildReplacesTemplate: a rebuild of an alias by the tenant whose
// build made it makes a new template that the alias stands for once it
// is ready (with the size it asked for), the replaced template is deleted
// unless a sandbox uses it, and a failed rebuild leaves the alias on the
// last good build.
func TestRebuildReplacesTemplate(t *testing.T) {
	st := openBuildStore(t)
	backend := newTemplatesBackend()
	caller := &service.Caller{Tenant: "t1", Admin: true}
	a := buildAPI(t, st, backend, caller)
	ctx := t.Context()

	_, out := buildAndWait(t, a, "web", `{"name":"web"}`, `[{"type":"RUN","args":["echo one"]}]`)
	if out["status"] != buildReady {
		t.Fatalf("first build: %v", out)
	}
	if name, _, _, _ := a.e2bTemplateOf(ctx, "t1", "web"); name != "web" {
		t.Fatalf("after the first build web stands for %q, want web", name)
	}
	backend.setInUse("web", true) // a sandbox runs from the first build

	_, out = buildAndWait(t, a, "web", `{"name":"web","cpuCount":2,"memoryMB":1024}`, `[{"type":"RUN","args":["echo two"]}]`)
	if out["status"] != buildReady {
		t.Fatalf("rebuild: %v", out)
	}
	second, cpus, mem, err := a.e2bTemplateOf(ctx, "t1", "web")
	if err != nil || !strings.HasPrefix(second, "web.") || cpus != 2 || mem != 1024 {
		t.Fatalf("after the rebuild web stands for %q (%d CPUs, %d MiB, %v), want web.… with 2 CPUs and 1024 MiB", second, cpus, mem, err)
	}
	if name, cpus, mem, _ := a.e2bTemplateOf(ctx, "t2", "web"); name != "web" || cpus != 0 || mem != 0 {
		t.Errorf("for tenant t2 web stands for %q (%d CPUs, %d MiB) after t1's rebuild, want web: another tenant's builds never change a name", name, cpus, mem)
	}
	if tpls, deleted := backend.state(); !tpls["web"] || len(deleted) != 0 {
		t.Errorf("the first build's template, in use, was deleted (templates %v, deleted %v)", tpls, deleted)
	}

	_, out = buildAndWait(t, a, "web", `{"name":"web"}`, `[{"type":"RUN","args":["false"]}]`)
	if out["status"] != buildError {
		t.Fatalf("failing rebuild: %v, want error", out)
	}
	if name, _, _, _ := a.e2bTemplateOf(ctx, "t1", "web"); name != second {
		t.Fatalf("after a failed rebuild web stands for %q, want the last good build %q", name, second)
	}

	backend.setInUse("web", false)
	_, out = buildAndWait(t, a, "web", `{"name":"web"}`, `[{"type":"RUN","args":["echo three"]}]`)
	third, _, _, _ := a.e2bTemplateOf(ctx, "t1", "web")
	if out["status"] != buildReady || third == second || !strings.HasPrefix(third, "web.") {
		t.Fatalf("third build %v stands as %q, want a new web.…", out, third)
	}
	if tpls, _ := backend.awaitState(func(tpls map[string]bool, _ []string) bool {
		return !tpls["web"] && !tpls[second]
	}); tpls["web"] || tpls[second] || !tpls[third] {
		t.Errorf("after the third build templates are %v, want the replaced web and %s deleted, %s kept", tpls, second, third)
	}
}

// TestRebuildNeverTouchesOthers: a build under a name another tenant's
// build made, or under a template no E2B build made, is refused with a
// 409 saying why, and the template is not touched.
func TestRebuildNeverTouchesOthers(t *testing.T) {
	st := openBuildStore(t)
	backend := newTemplatesBackend("native")
	caller := &service.Caller{Tenant: "t1", Admin: true}
	a := buildAPI(t, st, backend, caller)
	if _, out := buildAndWait(t, a, "web", `{"name":"web"}`, `[]`); out["status"] != buildReady {
		t.Fatalf("t1's build: %v", out)
	}
	*caller = service.Caller{Tenant: "t2", Admin: true}
	code, out := e2bDo(t, a, "POST", "/v3/templates", `{"name":"web"}`)
	if code != http.StatusConflict || !strings.Contains(fmt.Sprint(out["message"]), "another tenant") {
		t.Errorf("t2 builds t1's web: %d %v, want 409 saying it is another tenant's", code, out)
	}
	code, out = e2bDo(t, a, "POST", "/v3/templates", `{"name":"native"}`)
	if code != http.StatusConflict || !strings.Contains(fmt.Sprint(out["message"]), "not built through the E2B API") {
		t.Errorf("a build of a template space template build made: %d %v, want 409 saying so", code, out)
	}
	if name, _, _, _ := a.e2bTemplateOf(t.Context(), "t1", "web"); name != "web" || len(backendDeleted(backend)) != 0 {
		t.Errorf("web stands for %q and deleted %v after the refusals, want web and nothing deleted", name, backendDeleted(backend))
	}
}

// TestBuildStatusAfterRestart: a build running when the server stops ends
// in error, "the server restarted during the build", its sandbox removed;
// a new server over the same store answers that status, and a finished
// build's, instead of 404.
func TestBuildStatusAfterRestart(t *testing.T) {
	st := openBuildStore(t)
	caller := &service.Caller{Tenant: "t1", Admin: true}
	okBackend := newTemplatesBackend()
	a := buildAPI(t, st, okBackend, caller)
	doneID, out := buildAndWait(t, a, "done", `{"name":"done"}`, `[]`)
	if out["status"] != buildReady {
		t.Fatalf("finished build: %v", out)
	}

	fb := &blockingBackend{started: make(chan struct{})}
	b := buildAPI(t, st, fb, caller)
	code, out := e2bDo(t, b, "POST", "/v3/templates", `{"name":"slow"}`)
	if code != http.StatusAccepted {
		t.Fatalf("request: %d %v", code, out)
	}
	id := out["buildID"].(string)
	if code, out := e2bDo(t, b, "POST", "/v2/templates/slow/builds/"+id, `{"fromTemplate":"minimal","steps":[{"type":"RUN","args":["sleep 1000"]}]}`); code != http.StatusAccepted {
		t.Fatalf("start: %d %v", code, out)
	}
	<-fb.started
	if r, err := st.GetTemplateBuild(t.Context(), id); err != nil || r.State != store.BuildBuilding || r.SandboxID != "sb1" {
		t.Fatalf("running build's record: %+v %v, want building in sb1", r, err)
	}
	b.StopBuilds()
	if len(fb.deleted) != 1 {
		t.Errorf("sandboxes deleted at the stop: %v, want the build's", fb.deleted)
	}

	restarted := buildAPI(t, st, okBackend, caller)
	code, out = e2bDo(t, restarted, "GET", "/templates/slow/builds/"+id+"/status", "")
	reason, _ := out["reason"].(map[string]any)
	if code != http.StatusOK || out["status"] != buildError || !strings.Contains(fmt.Sprint(reason["message"]), "the server restarted during the build") {
		t.Errorf("status after a restart: %d %v, want error: the server restarted during the build", code, out)
	}
	if code, out := e2bDo(t, restarted, "GET", "/templates/done/builds/"+doneID+"/status", ""); code != http.StatusOK || out["status"] != buildReady {
		t.Errorf("finished build's status after a restart: %d %v, want ready", code, out)
	}
	*caller = service.Caller{Tenant: "t2", Admin: true}
	if code, _ := e2bDo(t, restarted, "GET", "/templates/done/builds/"+doneID+"/status", ""); code != http.StatusNotFound {
		t.Errorf("another tenant's build status after a restart: %d, want 404", code)
	}
}

// TestLostBuild: a build whose server died (its record left building, no
// write for buildLostAfter) is marked failed by whoever reads it, its
// sandbox removed as its tenant; a late write of its server does not
// bring it back, and a build whose record is fresh is left alone; the
// sweep does the same for a build nobody asks about.
func TestLostBuild(t *testing.T) {
	st := openBuildStore(t)
	ctx := t.Context()
	rec := store.TemplateBuild{ID: "bld-lost", TenantID: "t1", Alias: "web", Template: "web", State: store.BuildBuilding, SandboxID: "sb-build"}
	if err := st.CreateTemplateBuild(ctx, rec); err != nil {
		t.Fatal(err)
	}
	b := newTemplateBuilds()
	b.st = st
	var deleted []string
	b.deleteSandbox = func(_ context.Context, tenant, id string) error {
		deleted = append(deleted, tenant+"/"+id)
		return nil
	}
	fresh, err := b.stored(ctx, "t1", "web", rec.ID, time.Now())
	if err != nil || fresh.status != buildBuilding || len(deleted) != 0 {
		t.Fatalf("a fresh running build: %+v %v, deleted %v; want it building, untouched", fresh, err, deleted)
	}
	lost, err := b.stored(ctx, "t1", "web", rec.ID, time.Now().Add(buildLostAfter+time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if lost.status != buildError || lost.reason == nil || !strings.Contains(lost.reason.Message, "the server restarted during the build") {
		t.Errorf("lost build: %+v, want error: the server restarted during the build", lost)
	}
	if len(deleted) != 1 || deleted[0] != "t1/sb-build" {
		t.Errorf("sandboxes removed: %v, want t1/sb-build", deleted)
	}
	// The sweep finds a lost build nobody asks about.
	quiet := store.TemplateBuild{ID: "bld-quiet", TenantID: "t2", Alias: "db", Template: "db", State: store.BuildBuilding, SandboxID: "sb-quiet"}
	if err := st.CreateTemplateBuild(ctx, quiet); err != nil {
		t.Fatal(err)
	}
	b.sweepLost(ctx, time.Now())
	if r, _ := st.GetTemplateBuild(ctx, quiet.ID); r.State != store.BuildBuilding || len(deleted) != 1 {
		t.Errorf("a fresh build after a sweep: %+v, deleted %v; want it untouched", r, deleted)
	}
	b.sweepLost(ctx, time.Now().Add(buildLostAfter+time.Second))
	if r, _ := st.GetTemplateBuild(ctx, quiet.ID); r.State != store.BuildError || len(deleted) != 2 || deleted[1] != "t2/sb-quiet" {
		t.Errorf("a lost build after a sweep: %+v, deleted %v; want it failed and t2/sb-quiet removed", r, deleted)
	}
	late := rec
	late.State = store.BuildReady
	if err := st.UpdateTemplateBuild(ctx, late); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("a late write of the lost build's server: %v, want conflict", err)
	}
	if r, _ := st.GetTemplateBuild(ctx, rec.ID); r.State != store.BuildError || r.SandboxID != "" {
		t.Errorf("lost build's record: %+v, want error with no sandbox", r)
	}
}

// TestBuildRequestRefusals: tags other than default and sizes outside
// SPACE's bounds are refused with a 400 naming them; the default tag, as
// name:default or in tags, is accepted.
func TestBuildRequestRefusals(t *testing.T) {
	st := openBuildStore(t)
	a := buildAPI(t, st, newTemplatesBackend(), &service.Caller{Tenant: "t1", Admin: true})
	for _, c := range []struct{ body, want string }{
		{`{"name":"web:v2"}`, `template tag "v2"`},
		{`{"name":"web","tags":["default","prod"]}`, `template tag "prod"`},
		{`{"name":"web","cpuCount":0}`, "cpuCount 0"},
		{`{"name":"web","cpuCount":64}`, "cpuCount 64"},
		{`{"name":"web","memoryMB":32}`, "memoryMB 32"},
		{`{"name":"Web App"}`, "template name"},
	} {
		code, out := e2bDo(t, a, "POST", "/v3/templates", c.body)
		if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["message"]), c.want) {
			t.Errorf("%s: %d %v, want 400 naming %s", c.body, code, out, c.want)
		}
	}
	for i, body := range []string{`{"name":"a:default"}`, `{"name":"b","tags":["default"]}`} {
		if code, out := e2bDo(t, a, "POST", "/v3/templates", body); code != http.StatusAccepted {
			t.Errorf("case %d %s: %d %v, want accepted", i, body, code, out)
		}
	}
}

// TestTemplateTags: a built template's tags are its latest build's
// "default"; assigning default to it answers that build, assigning any
// other tag is refused by name, and an unbuilt name has none.
func TestTemplateTags(t *testing.T) {
	st := openBuildStore(t)
	a := buildAPI(t, st, newTemplatesBackend(), &service.Caller{Tenant: "t1", Admin: true})
	id, _ := buildAndWait(t, a, "web", `{"name":"web"}`, `[]`)
	mux := http.NewServeMux()
	a.Register(mux)
	r := httptest.NewRequest("GET", PathPrefix+"/templates/web/tags", nil)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	var tags []map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &tags); err != nil || w.Code != 200 || len(tags) != 1 || tags[0]["tag"] != "default" || tags[0]["buildID"] != id {
		t.Errorf("GET tags: %d %s, want [default of %s]", w.Code, w.Body, id)
	}
	if code, _ := e2bDo(t, a, "GET", "/templates/none/tags", ""); code != http.StatusNotFound {
		t.Errorf("tags of an unbuilt name: %d, want 404", code)
	}
	if code, out := e2bDo(t, a, "POST", "/templates/tags", `{"target":"web","tags":["default"]}`); code != http.StatusCreated || out["buildID"] != id {
		t.Errorf("assign default: %d %v, want 201 with build %s", code, out, id)
	}
	if code, out := e2bDo(t, a, "POST", "/templates/tags", `{"target":"web","tags":["prod"]}`); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["message"]), `"prod"`) {
		t.Errorf("assign prod: %d %v, want 400 naming the tag", code, out)
	}
}

// putUpload PUTs body as tenant's upload hash through its signed url.
func putUpload(t *testing.T, a *API, tenant, hash string, body []byte) (int, string) {
	t.Helper()
	mux := http.NewServeMux()
	a.Register(mux)
	r := httptest.NewRequest("PUT", a.uploadPath(tenant, hash, time.Now()), strings.NewReader(string(body)))
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

// TestUploadBounds: a tenant keeps at most MaxTenantUploads uploads and
// MaxTenantUploadBytes in all (a refusal is a 429 naming the bound,
// counted, and keeps nothing); replacing an upload takes no new slot,
// another tenant has its own bounds, and an upload unused past
// UploadMaxAge is removed (counted) at the next upload, while one a build
// used stays.
func TestUploadBounds(t *testing.T) {
	files := t.TempDir()
	up := tarOf(t, true, tar.Header{Name: "a.txt", Typeflag: tar.TypeReg})
	a := New(Config{Host: buildHost{c: &service.Caller{Tenant: "t1"}}, TokenKey: []byte("k"), FilesDir: files,
		MaxTenantUploads: 2, MaxTenantUploadBytes: int64(3 * len(up)), UploadMaxAge: time.Hour,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	h := func(c byte) string { return strings.Repeat(string(c), 64) }
	for _, c := range []byte{'a', 'b'} {
		if code, body := putUpload(t, a, "t1", h(c), up); code != http.StatusOK {
			t.Fatalf("upload %c: %d %s", c, code, body)
		}
	}
	code, body := putUpload(t, a, "t1", h('c'), up)
	if code != http.StatusTooManyRequests || !strings.Contains(body, "at most 2") {
		t.Errorf("third upload: %d %s, want 429 naming the count bound", code, body)
	}
	if _, err := os.Stat(a.filesPath("t1", h('c'))); !os.IsNotExist(err) {
		t.Errorf("the refused upload was kept: %v", err)
	}
	if n := a.uploads.refused.Value("count"); n != 1 {
		t.Errorf("count refusals counted %d, want 1", n)
	}
	if code, body := putUpload(t, a, "t1", h('a'), up); code != http.StatusOK {
		t.Errorf("replacing an upload: %d %s, want it kept", code, body)
	}
	if code, body := putUpload(t, a, "t2", h('c'), up); code != http.StatusOK {
		t.Errorf("another tenant's upload: %d %s, want its own bounds", code, body)
	}

	big := tarOf(t, false, tar.Header{Name: "big", Typeflag: tar.TypeReg}, tar.Header{Name: "big2", Typeflag: tar.TypeReg})
	code, body = putUpload(t, a, "t2", h('d'), append(big, make([]byte, 3*len(up))...))
	if code != http.StatusTooManyRequests || !strings.Contains(body, "bytes") {
		t.Errorf("upload past the bytes bound: %d %s, want 429 naming the bytes", code, body)
	}
	if n := a.uploads.refused.Value("bytes"); n != 1 {
		t.Errorf("bytes refusals counted %d, want 1", n)
	}

	old := time.Now().Add(-2 * time.Hour)
	for _, c := range []byte{'a', 'b'} {
		if err := os.Chtimes(a.filesPath("t1", h(c)), old, old); err != nil {
			t.Fatal(err)
		}
	}
	// A build uses b: it is touched and stays.
	if err := a.extractUpload(t.Context(), "t1", h('b'), filepath.Join(t.TempDir(), "ctx")); err != nil {
		t.Fatal(err)
	}
	if code, body := putUpload(t, a, "t1", h('e'), up); code != http.StatusOK {
		t.Fatalf("upload after one expired: %d %s", code, body)
	}
	if _, err := os.Stat(a.filesPath("t1", h('a'))); !os.IsNotExist(err) {
		t.Errorf("the upload unused past its age is still kept: %v", err)
	}
	if _, err := os.Stat(a.filesPath("t1", h('b'))); err != nil {
		t.Errorf("the upload a build used was removed: %v", err)
	}
	if n := a.uploads.expired.Value("upload"); n != 1 {
		t.Errorf("expired uploads counted %d, want 1", n)
	}
}

// BenchmarkE2BTemplateOf measures what resolving a create's templateID
// through the build records costs, against the store-less lookup, in
// interleaved rounds: alias "web" with 10 recorded builds.
func BenchmarkE2BTemplateOf(b *testing.B) {
	st, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "space.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for i := range maxKeptBuilds {
		r := store.TemplateBuild{ID: fmt.Sprint("bld-", i), TenantID: "t1", Alias: "web", Template: fmt.Sprint("web.", i), State: store.BuildWaiting}
		if err := st.CreateTemplateBuild(b.Context(), r); err != nil {
			b.Fatal(err)
		}
		r.State = store.BuildReady
		if err := st.UpdateTemplateBuild(b.Context(), r); err != nil {
			b.Fatal(err)
		}
	}
	recorded := &API{builds: newTemplateBuilds()}
	recorded.builds.st = st
	memory := &API{builds: newTemplateBuilds()}
	for _, c := range []struct {
		name string
		a    *API
	}{{"memory", memory}, {"recorded", recorded}, {"memory", memory}, {"recorded", recorded}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, _, _, err := c.a.e2bTemplateOf(b.Context(), "t1", "web"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

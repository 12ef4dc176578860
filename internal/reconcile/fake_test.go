package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore/filestore"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// call is one request a fakeNode received: the method and its main argument
// (execution id, snapshot id or template name) and, for requests with a
// body, the body.
type call struct {
	Method string
	Arg    string
	Body   any
}

func (c call) String() string { return c.Method + "(" + c.Arg + ")" }

// fakeNode is a NodeAPI that records every call and answers from what the
// test configured: errors per method (a queue, consumed one per call, then
// a sticky error), hooks that run inside a call, and results. Stop and
// DeleteSnapshot are idempotent, like the real node's.
type fakeNode struct {
	id string

	mu        sync.Mutex // guards everything below
	calls     []call
	queued    map[string][]error
	sticky    map[string]error
	hooks     map[string]func()
	startExec *nodev1.Execution // what Start answers; nil: running
	upload    func(id string, req nodev1.UploadSnapshot) (*nodev1.Artifacts, error)
	// readings are sent to the caller of UploadProgress and
	// DownloadProgress before the operation.
	readings  []nodev1.Progress
	snapSize  int64
	snapshots map[string]bool // snapshot ids the node holds
}

func newFakeNode(id string) *fakeNode {
	return &fakeNode{
		id: id, queued: map[string][]error{}, sticky: map[string]error{}, hooks: map[string]func(){},
		snapSize: 4096, snapshots: map[string]bool{},
	}
}

// failNext makes the next n calls of method fail with err.
func (f *fakeNode) failNext(method string, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.queued[method] = append(f.queued[method], err)
	}
}

// failAlways makes every call of method fail with err (nil: succeed again).
func (f *fakeNode) failAlways(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sticky[method] = err
}

// onCall runs fn inside every call of method, before it answers.
func (f *fakeNode) onCall(method string, fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hooks[method] = fn
}

// enter records a call and returns the error configured for it.
func (f *fakeNode) enter(method, arg string, body any) error {
	f.mu.Lock()
	f.calls = append(f.calls, call{Method: method, Arg: arg, Body: body})
	var err error
	if q := f.queued[method]; len(q) > 0 {
		err, f.queued[method] = q[0], q[1:]
	} else {
		err = f.sticky[method]
	}
	hook := f.hooks[method]
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	if err != nil {
		return fmt.Errorf("fake node %s: %s %s: %w", f.id, method, arg, err)
	}
	return nil
}

// callsTo returns the calls of method, in order.
func (f *fakeNode) callsTo(method string) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// methods returns "Method(arg)" for every call, in order.
func (f *fakeNode) methods() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.calls))
	for _, c := range f.calls {
		out = append(out, c.String())
	}
	return out
}

func (f *fakeNode) holds(snapID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snapshots[snapID]
}

func (f *fakeNode) Start(ctx context.Context, req nodev1.StartExecution) (*nodev1.Execution, error) {
	if err := f.enter("Start", req.ExecID, req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ex := nodev1.Execution{State: nodev1.ExecRunning}
	if f.startExec != nil {
		ex = *f.startExec
	}
	ex.ExecID, ex.SandboxID, ex.Generation, ex.ActivationID = req.ExecID, req.SandboxID, req.Generation, req.ActivationID
	ex.Runtime, ex.Template, ex.StartedAt = req.Runtime, req.Template, time.Now()
	return &ex, nil
}

func (f *fakeNode) Stop(ctx context.Context, execID string) error {
	return f.enter("Stop", execID, nil)
}

func (f *fakeNode) Pause(ctx context.Context, execID string) error {
	return f.enter("Pause", execID, nil)
}

func (f *fakeNode) Resume(ctx context.Context, execID string) error {
	return f.enter("Resume", execID, nil)
}

func (f *fakeNode) Snapshot(ctx context.Context, execID string, req nodev1.TakeSnapshot) (*nodev1.Snapshot, error) {
	if err := f.enter("Snapshot", execID, req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snapshots[req.SnapshotID] = true
	return &nodev1.Snapshot{ID: req.SnapshotID, Kind: req.Kind, SizeBytes: f.snapSize, CreatedAt: time.Now()}, nil
}

func (f *fakeNode) DeleteSnapshot(ctx context.Context, id string) error {
	if err := f.enter("DeleteSnapshot", id, nil); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.snapshots, id)
	return nil
}

func (f *fakeNode) Upload(ctx context.Context, id string, req nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
	if err := f.enter("Upload", id, req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	upload := f.upload
	f.mu.Unlock()
	if upload == nil {
		return nil, fmt.Errorf("fake node %s: upload %s: no upload configured: %w", f.id, id, errdefs.ErrFailedPrecondition)
	}
	return upload(id, req)
}

// UploadProgress is Upload after the configured readings.
func (f *fakeNode) UploadProgress(ctx context.Context, id string, req nodev1.UploadSnapshot, onProgress func(nodev1.Progress)) (*nodev1.Artifacts, error) {
	f.sendReadings("upload", onProgress)
	return f.Upload(ctx, id, req)
}

// DownloadProgress is Download after the configured readings.
func (f *fakeNode) DownloadProgress(ctx context.Context, id string, req nodev1.DownloadSnapshot, onProgress func(nodev1.Progress)) (*nodev1.Snapshot, error) {
	f.sendReadings("download", onProgress)
	return f.Download(ctx, id, req)
}

func (f *fakeNode) sendReadings(phase string, onProgress func(nodev1.Progress)) {
	f.mu.Lock()
	rs := slices.Clone(f.readings)
	f.mu.Unlock()
	for _, r := range rs {
		r.Phase = phase
		onProgress(r)
	}
}

func (f *fakeNode) Download(ctx context.Context, id string, req nodev1.DownloadSnapshot) (*nodev1.Snapshot, error) {
	if err := f.enter("Download", id, req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snapshots[id] = true
	return &nodev1.Snapshot{ID: id, SizeBytes: f.snapSize}, nil
}

func (f *fakeNode) EnsureTemplate(ctx context.Context, name, source string) (*nodev1.TemplateReady, error) {
	if err := f.enter("EnsureTemplate", name, source); err != nil {
		return nil, err
	}
	return &nodev1.TemplateReady{Name: name}, nil
}

var _ NodeAPI = (*fakeNode)(nil)

// clockStore is the real SQLite store with one test-only ability: a
// sandbox's UpdatedAt can be moved into the past (what a row last written
// long ago reads like), until the reconciler writes the row again.
type clockStore struct {
	store.Store

	mu      sync.Mutex // guards updated
	updated map[string]time.Time
}

// backdate makes sandbox id read as last updated d ago.
func (s *clockStore) backdate(id string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updated[id] = time.Now().Add(-d).UTC()
}

func (s *clockStore) fix(sb *sandbox.Sandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if at, ok := s.updated[sb.ID]; ok {
		sb.UpdatedAt = at
	}
}

func (s *clockStore) GetSandbox(ctx context.Context, tenant, id string) (*sandbox.Sandbox, error) {
	sb, err := s.Store.GetSandbox(ctx, tenant, id)
	if err == nil {
		s.fix(sb)
	}
	return sb, err
}

func (s *clockStore) GetSandboxByID(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	sb, err := s.Store.GetSandboxByID(ctx, id)
	if err == nil {
		s.fix(sb)
	}
	return sb, err
}

func (s *clockStore) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*sandbox.Sandbox, error) {
	sbs, err := s.Store.ListSandboxes(ctx, f)
	for _, sb := range sbs {
		s.fix(sb)
	}
	return sbs, err
}

func (s *clockStore) UpdateSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	err := s.Store.UpdateSandbox(ctx, sb)
	if err == nil {
		s.mu.Lock()
		delete(s.updated, sb.ID)
		s.mu.Unlock()
	}
	return err
}

// migrated holds the files of an empty, fully migrated database, made once:
// migrating costs far more than copying, and every test wants a fresh store.
var migrated struct {
	once  sync.Once
	files map[string][]byte // "db", "db-wal": contents
	err   error
}

// openStore opens a fresh SQLite store in t.TempDir().
func openStore(t testing.TB) store.Store {
	t.Helper()
	migrated.once.Do(func() {
		dir, err := os.MkdirTemp("", "reconcile-test-db-")
		if err != nil {
			migrated.err = err
			return
		}
		defer os.RemoveAll(dir)
		db, err := sqlite.Open(context.Background(), filepath.Join(dir, "db"))
		if err != nil {
			migrated.err = err
			return
		}
		if migrated.err = db.Close(); migrated.err != nil {
			return
		}
		migrated.files = map[string][]byte{}
		for _, name := range []string{"db", "db-wal"} {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if errors.Is(err, os.ErrNotExist) && name != "db" {
				continue
			}
			if err != nil {
				migrated.err = err
				return
			}
			migrated.files[name] = b
		}
	})
	if migrated.err != nil {
		t.Fatalf("migrated database: %v", migrated.err)
	}
	dir := t.TempDir()
	for name, b := range migrated.files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sqlite.Open(t.Context(), filepath.Join(dir, "db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// harness is a reconciler over a fresh SQLite store, fake nodes and (when
// asked for) a file object store, all in t.TempDir().
type harness struct {
	t      testing.TB
	ctx    context.Context
	st     *clockStore
	r      *Reconciler
	nodes  map[string]*fakeNode
	down   map[string]bool // nodes the reconciler cannot reach
	objs   *filestore.Store
	tenant string
}

// newHarness builds a reconciler with cfg and nodes n1 and n2. withObjects
// adds a file object store (cfg.Objects, and a TenantKey).
func newHarness(t testing.TB, cfg Config, withObjects bool) *harness {
	t.Helper()
	return newHarnessOn(t, cfg, withObjects, openStore(t))
}

// newHarnessOn is newHarness over db.
func newHarnessOn(t testing.TB, cfg Config, withObjects bool, db store.Store) *harness {
	t.Helper()
	ctx := t.Context()
	h := &harness{
		t: t, ctx: ctx, st: &clockStore{Store: db, updated: map[string]time.Time{}},
		nodes: map[string]*fakeNode{"n1": newFakeNode("n1"), "n2": newFakeNode("n2")},
		down:  map[string]bool{},
	}
	if withObjects {
		objs, err := filestore.Open(ctx, filepath.Join(t.TempDir(), "objects"))
		if err != nil {
			t.Fatalf("open object store: %v", err)
		}
		t.Cleanup(func() { objs.Close() })
		h.objs = objs
		if cfg.Objects == nil {
			cfg.Objects = objs
		}
		if cfg.TenantKey == nil {
			cfg.TenantKey = func(ctx context.Context, tenant string) (string, error) { return "key-" + tenant, nil }
		}
	}
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "acme", CreatedAt: time.Now().UTC()}
	if err := db.CreateTenant(ctx, tn); err != nil {
		t.Fatalf("create tenant: %v", err)
	}
	h.tenant = tn.ID
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.r = New(cfg, h.st, h.node, log)
	return h
}

// node is the reconciler's resolver of node ids. Tests set down before the
// passes that must not reach a node; passes run on the test's goroutine.
func (h *harness) node(id string) (NodeAPI, error) {
	n, ok := h.nodes[id]
	if !ok || h.down[id] {
		return nil, fmt.Errorf("node %s: not connected: %w", id, errdefs.ErrUnavailable)
	}
	return n, nil
}

// newSandbox stores a sandbox in state (its Desired where it settles) on
// node n1, running runtime, after edit.
func (h *harness) newSandbox(state sandbox.State, runtime string, edit func(sb *sandbox.Sandbox)) *sandbox.Sandbox {
	h.t.Helper()
	sb := sandbox.New(h.tenant, sandbox.Spec{Template: "minimal", Runtime: runtime, CPUs: 1, MemoryMiB: 256, DiskMiB: 512}, time.Now())
	sb.State, sb.Desired, sb.Node = state, sandbox.Settled(state), "n1"
	if edit != nil {
		edit(sb)
	}
	if err := h.st.CreateSandbox(h.ctx, sb); err != nil {
		h.t.Fatalf("create sandbox: %v", err)
	}
	return sb
}

// pass runs one reconcile pass over id.
func (h *harness) pass(id string) (time.Duration, error) {
	h.t.Helper()
	return h.r.reconcile(h.ctx, id)
}

// mustPass runs one pass and fails the test on an error.
func (h *harness) mustPass(id string) time.Duration {
	h.t.Helper()
	after, err := h.pass(id)
	if err != nil {
		h.t.Fatalf("reconcile %s: %v", id, err)
	}
	return after
}

// get reads sandbox id back.
func (h *harness) get(id string) *sandbox.Sandbox {
	h.t.Helper()
	sb, err := h.st.GetSandboxByID(h.ctx, id)
	if err != nil {
		h.t.Fatalf("get sandbox %s: %v", id, err)
	}
	return sb
}

// wantState fails unless sandbox id is in state with desired.
func (h *harness) wantState(id string, state, desired sandbox.State) *sandbox.Sandbox {
	h.t.Helper()
	sb := h.get(id)
	if sb.State != state || sb.Desired != desired {
		h.t.Fatalf("sandbox is %s (desired %s, reason %q), want %s (desired %s)", sb.State, sb.Desired, sb.Reason, state, desired)
	}
	return sb
}

// snapshot stores a snapshot row of sb; edit adjusts the defaults (a ready
// disk snapshot of tier manual on sb's node, created a minute ago).
func (h *harness) snapshot(sb *sandbox.Sandbox, edit func(s *store.Snapshot)) store.Snapshot {
	h.t.Helper()
	s := store.Snapshot{
		ID: sandbox.NewSnapshotID(), SandboxID: sb.ID, Tenant: sb.Tenant, Kind: store.SnapshotDisk, Tier: "manual",
		State: store.SnapshotReady, Node: sb.Node, Runtime: sb.Runtime, Template: sb.Template, CPUs: sb.CPUs,
		MemoryMiB: sb.MemoryMiB, Generation: sb.Generation, CreatedAt: time.Now().Add(-time.Minute).UTC(),
	}
	if edit != nil {
		edit(&s)
	}
	if err := h.st.CreateSnapshot(h.ctx, s); err != nil {
		h.t.Fatalf("create snapshot: %v", err)
	}
	return s
}

// getSnapshot reads snapshot id back.
func (h *harness) getSnapshot(id string) store.Snapshot {
	h.t.Helper()
	s, err := h.st.GetSnapshot(h.ctx, "", id)
	if err != nil {
		h.t.Fatalf("get snapshot %s: %v", id, err)
	}
	return s
}

// snapshots lists sandbox id's snapshot rows.
func (h *harness) snapshots(id string) []store.Snapshot {
	h.t.Helper()
	list, err := h.st.ListSnapshots(h.ctx, store.SnapshotFilter{SandboxID: id})
	if err != nil {
		h.t.Fatalf("list snapshots: %v", err)
	}
	return list
}

// events returns sandbox id's events as "type: message".
func (h *harness) events(id string) []string {
	h.t.Helper()
	evs, err := h.st.ListEvents(h.ctx, id)
	if err != nil {
		h.t.Fatalf("list events: %v", err)
	}
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.Type+": "+e.Message)
	}
	return out
}

// wantEvent fails unless sandbox id has an event of typ whose message
// contains substr.
func (h *harness) wantEvent(id, typ, substr string) {
	h.t.Helper()
	evs := h.events(id)
	if !slices.ContainsFunc(evs, func(e string) bool {
		return strings.HasPrefix(e, typ+": ") && strings.Contains(e, substr)
	}) {
		h.t.Fatalf("no %q event containing %q in %q", typ, substr, evs)
	}
}

// observe reports what node holds, as its heartbeat would.
func (h *harness) observe(node string, execs ...nodev1.Execution) { h.r.Observe(node, execs) }

// exec is the report of sb's current execution in state st.
func exec(sb *sandbox.Sandbox, st nodev1.ExecState) nodev1.Execution {
	return nodev1.Execution{
		ExecID: sb.ExecID, SandboxID: sb.ID, Generation: sb.Generation, ActivationID: sb.ActivationID,
		Runtime: sb.Runtime, Template: sb.Template, State: st, StartedAt: time.Now().Add(-time.Hour),
	}
}

// wantCalls fails unless node received exactly want ("Method(arg)").
func wantCalls(t *testing.T, n *fakeNode, want ...string) {
	t.Helper()
	if got := n.methods(); !slices.Equal(got, want) {
		t.Fatalf("node %s calls:\n got %q\nwant %q", n.id, got, want)
	}
}

// wantReason fails unless sb's reason contains every substring.
func wantReason(t *testing.T, sb *sandbox.Sandbox, substrs ...string) {
	t.Helper()
	for _, s := range substrs {
		if !strings.Contains(sb.Reason, s) {
			t.Fatalf("reason %q does not contain %q", sb.Reason, s)
		}
	}
}

package nodemanager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/privop"
	"github.com/spacesandbox/space/internal/progress"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
)

// memStorage is an in-memory Storage for the node-manager's unit tests.
type memStorage struct {
	mu        sync.Mutex
	dir       string
	templates map[string]bool
	clones    map[string]bool
	// snaps maps a snapshot to the volume it was taken of.
	snaps map[string]string
}

func (m *memStorage) Name() string { return "mem" }

// hasTemplate, hasClone and snapshotOf read the storage's maps under its
// lock, as the node-manager's goroutines write them: a test reads them
// through these, never directly (go test -race).
func (m *memStorage) hasTemplate(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.templates[name]
}
func (m *memStorage) hasClone(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.clones[id]
}
func (m *memStorage) snapshotOf(snap string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.snaps[snap]
	return v, ok
}
func (m *memStorage) CreateTemplate(_ context.Context, name string) (string, error) {
	p := filepath.Join(m.dir, "t-"+name)
	if _, err := os.Stat(p); err == nil {
		return "", fmt.Errorf("template %s: %w", name, errdefs.ErrConflict)
	}
	return p, os.MkdirAll(p, 0o755)
}
func (m *memStorage) SealTemplate(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.templates[name] = true
	return nil
}
func (m *memStorage) DeleteTemplate(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.templates, name)
	return os.RemoveAll(filepath.Join(m.dir, "t-"+name))
}
func (m *memStorage) Templates(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for n := range m.templates {
		out = append(out, n)
	}
	return out, nil
}
func (m *memStorage) Clone(_ context.Context, _, id string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clones[id] = true
	return filepath.Join(m.dir, "c-"+id), nil
}
func (m *memStorage) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.clones, id)
	return nil
}
func (m *memStorage) Snapshot(_ context.Context, id, snap string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.clones[id] {
		return "", fmt.Errorf("volume %s: %w", id, errdefs.ErrNotFound)
	}
	if _, ok := m.snaps[snap]; ok {
		return "", fmt.Errorf("snapshot %s: %w", snap, errdefs.ErrConflict)
	}
	m.snaps[snap] = id
	return filepath.Join(m.dir, "s-"+snap), nil
}
func (m *memStorage) CloneSnapshot(_ context.Context, snap, id string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.snaps[snap]; !ok {
		return "", fmt.Errorf("snapshot %s: %w", snap, errdefs.ErrNotFound)
	}
	m.clones[id] = true
	return filepath.Join(m.dir, "c-"+id), nil
}
func (m *memStorage) Volumes(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []string{}
	for id := range m.clones {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}
func (m *memStorage) DeleteSnapshot(_ context.Context, snap string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.snaps, snap)
	return nil
}

// pipeDriver "starts" an execution by handing out one end of a socketpair and
// keeping the other, so the test can check the descriptor crossed the socket.
type pipeDriver struct {
	mu    sync.Mutex
	peers map[string]*os.File
	// gate, when set, holds every Start until it is closed; entered
	// receives one value per Start that began waiting on it.
	gate    chan struct{}
	entered chan string
}

func (d *pipeDriver) Name() string              { return "ns" }
func (d *pipeDriver) Features() driver.Features { return driver.Features{} }
func (d *pipeDriver) Start(_ context.Context, s driver.Spec) (*driver.Instance, error) {
	d.mu.Lock()
	gate, entered := d.gate, d.entered
	d.mu.Unlock()
	if gate != nil {
		entered <- s.ExecID
		<-gate
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.peers[s.ExecID] = os.NewFile(uintptr(fds[1]), "peer")
	d.mu.Unlock()
	return &driver.Instance{ExecID: s.ExecID, Pid: os.Getpid(), Channel: os.NewFile(uintptr(fds[0]), "host")}, nil
}
func (d *pipeDriver) Kill(context.Context, string) error { return nil }
func (d *pipeDriver) Cleanup(_ context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f := d.peers[id]; f != nil {
		f.Close()
		delete(d.peers, id)
	}
	return nil
}
func (d *pipeDriver) Stats(context.Context, string) (driver.Stats, error) {
	return driver.Stats{Pids: 1}, nil
}
func (d *pipeDriver) List(context.Context) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make([]string, 0, len(d.peers))
	for id := range d.peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}
func (d *pipeDriver) Alive(_ context.Context, id string) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peers[id] != nil, nil
}

func startServer(t *testing.T) (*privop.Client, *memStorage, *pipeDriver) {
	t.Helper()
	dir := t.TempDir()
	guest := filepath.Join(dir, "space-guest")
	os.WriteFile(guest, []byte("#!/bin/true\n"), 0o755)
	st := &memStorage{dir: dir, templates: map[string]bool{}, clones: map[string]bool{}, snaps: map[string]string{}}
	drv := &pipeDriver{peers: map[string]*os.File{}}
	builds := 0
	var mu sync.Mutex
	srv, err := NewServer(Config{
		Socket: filepath.Join(dir, "nm.sock"), GuestBinary: guest, Storage: st,
		SnapshotDir: filepath.Join(dir, "snapshots"),
		Drivers:     map[string]driver.Driver{"ns": drv},
		Build: func(ctx context.Context, source, dest string, out io.Writer) error {
			mu.Lock()
			builds++
			mu.Unlock()
			if source == "builtin:broken" {
				return errors.New("no such source")
			}
			if source == "builtin:progress" {
				// Waits until the caller has seen the first line.
				fmt.Fprint(out, "I: Retrieving Release\nI: Validating 12 of 40\r")
				<-progressGate
				fmt.Fprintln(out, "I: Validating 40 of 40")
				return nil
			}
			time.Sleep(20 * time.Millisecond) // let concurrent callers pile up
			return nil
		},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.progressEvery = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	c := privop.NewClient(filepath.Join(dir, "nm.sock"))
	for i := 0; ; i++ {
		if _, err := c.Hello(context.Background()); err == nil {
			break
		} else if i > 200 {
			t.Fatalf("node-manager not answering: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c, st, drv
}

func TestStartPassesTheGuestChannel(t *testing.T) {
	c, st, drv := startServer(t)
	ctx := context.Background()
	if _, err := c.EnsureTemplate(ctx, "minimal", "builtin:minimal"); err != nil {
		t.Fatal(err)
	}
	started, ch, _, err := c.Start(ctx, privop.StartArgs{ExecID: "sb1-g1-abc", SandboxID: "sb1", Template: "minimal", Runtime: "ns", Hostname: "sb1", CPUs: 1, MemoryMiB: 256, PidsMax: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if started.Pid != os.Getpid() {
		t.Errorf("pid = %d", started.Pid)
	}
	// Bytes written on the received descriptor arrive at the driver's end.
	if _, err := ch.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	drv.mu.Lock()
	peer := drv.peers["sb1-g1-abc"]
	drv.mu.Unlock()
	buf := make([]byte, 4)
	if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("peer read %q, %v", buf, err)
	}
	if err := c.Cleanup(ctx, "sb1-g1-abc", ""); err != nil {
		t.Fatal(err)
	}
	if st.hasClone("sb1-g1-abc") {
		t.Error("clone left after cleanup")
	}
	// Cleanup is idempotent.
	if err := c.Cleanup(ctx, "sb1-g1-abc", ""); err != nil {
		t.Errorf("second cleanup: %v", err)
	}
}

func TestValidation(t *testing.T) {
	c, _, _ := startServer(t)
	ctx := context.Background()
	c.EnsureTemplate(ctx, "minimal", "builtin:minimal")
	good := privop.StartArgs{ExecID: "sb1-g1-abc", SandboxID: "sb1", Template: "minimal", Runtime: "ns", Hostname: "sb1", CPUs: 1, MemoryMiB: 256, PidsMax: 256}
	tests := []struct {
		name string
		edit func(*privop.StartArgs)
		want error
	}{
		{"exec id with slash", func(a *privop.StartArgs) { a.ExecID = "../../etc" }, errdefs.ErrInvalidArgument},
		{"exec id upper", func(a *privop.StartArgs) { a.ExecID = "ABC" }, errdefs.ErrInvalidArgument},
		{"exec id too long", func(a *privop.StartArgs) { a.ExecID = strings.Repeat("a", 65) }, errdefs.ErrInvalidArgument},
		{"template traversal", func(a *privop.StartArgs) { a.Template = "../x" }, errdefs.ErrInvalidArgument},
		{"unknown runtime", func(a *privop.StartArgs) { a.Runtime = "vm" }, errdefs.ErrInvalidArgument},
		{"hostname", func(a *privop.StartArgs) { a.Hostname = "a b" }, errdefs.ErrInvalidArgument},
		{"cpus", func(a *privop.StartArgs) { a.CPUs = 0 }, errdefs.ErrInvalidArgument},
		{"memory", func(a *privop.StartArgs) { a.MemoryMiB = 1 << 30 }, errdefs.ErrInvalidArgument},
		{"pids", func(a *privop.StartArgs) { a.PidsMax = 1 }, errdefs.ErrInvalidArgument},
		{"disk", func(a *privop.StartArgs) { a.DiskMiB = 2 << 20 }, errdefs.ErrInvalidArgument},
		{"disk negative", func(a *privop.StartArgs) { a.DiskMiB = -1 }, errdefs.ErrInvalidArgument},
		{"template absent", func(a *privop.StartArgs) { a.Template = "other" }, errdefs.ErrFailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := good
			tt.edit(&a)
			_, f, _, err := c.Start(ctx, a)
			if f != nil {
				f.Close()
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Start = %v, want %v", err, tt.want)
			}
		})
	}
	for _, id := range []string{"", "../x", "a/b"} {
		if err := c.Cleanup(ctx, id, ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Cleanup(%q) = %v, want invalid argument", id, err)
		}
	}
}

func TestEnsureTemplateSharesOneBuildAndReportsFailure(t *testing.T) {
	c, st, _ := startServer(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.EnsureTemplate(ctx, "shared", "builtin:minimal")
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !st.hasTemplate("shared") {
		t.Error("template not sealed")
	}
	if _, err := c.EnsureTemplate(ctx, "broken", "builtin:broken"); err == nil || !strings.Contains(err.Error(), "no such source") {
		t.Errorf("broken build = %v, want its cause", err)
	}
	if _, err := c.EnsureTemplate(ctx, "absent", ""); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("absent without source = %v, want not found", err)
	}
}

// progressGate holds the "builtin:progress" build until a test lets it go on.
var progressGate = make(chan struct{})

// TestEnsureTemplateReportsProgress: a caller that asks gets the build's
// readings while it runs, and its last one with the answer; one that does not
// ask gets the plain answer.
func TestEnsureTemplateReportsProgress(t *testing.T) {
	c, _, _ := startServer(t)
	var got []progress.Report
	released := false
	ok, err := c.EnsureTemplateProgress(context.Background(), "withprogress", "builtin:progress", func(r progress.Report) {
		got = append(got, r)
		if !released && r.Message == "I: Validating 12 of 40" {
			released = true
			close(progressGate)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !released {
		t.Fatalf("readings %+v: none showed the build's latest line (after its carriage return)", got)
	}
	for _, r := range got {
		if r.Phase != "build" || r.Final || r.Unit != progress.UnitSteps {
			t.Errorf("reading %+v: want phase build, steps, not final", r)
		}
	}
	if ok.Progress == nil || !ok.Progress.Final || !strings.HasPrefix(ok.Progress.Message, "built from builtin:progress: ") || ok.Progress.Done != 6 {
		t.Errorf("last reading = %+v, want final, \"built from …\", 6 steps (start, 3 lines, seal, end)", ok.Progress)
	}
	// A caller that does not ask gets no readings before the answer.
	if ok, err := c.EnsureTemplate(context.Background(), "withprogress", "builtin:progress"); err != nil || ok.Progress != nil {
		t.Errorf("EnsureTemplate of a present template = %+v, %v; want no progress", ok, err)
	}
}

func TestMalformedRequestsAreRefused(t *testing.T) {
	c, _, _ := startServer(t)
	for _, raw := range [][]byte{
		{0, 0, 0, 3, '{', '{', '{'},
		{0xff, 0xff, 0xff, 0xff},
		append([]byte{0, 0, 0, 20}, []byte(`{"op":"format_disk"}`)...),
	} {
		conn, err := net.Dial("unix", c.Socket())
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(raw)
		var resp privop.Response
		_, err = privop.ReadMessage(conn.(*net.UnixConn), &resp)
		conn.Close()
		if err != nil || resp.Error == "" {
			t.Errorf("request %q: response %+v, %v; want an error answer", raw, resp, err)
		}
	}
	if _, err := c.Hello(context.Background()); err != nil {
		t.Errorf("server unwell after malformed requests: %v", err)
	}
}

// TestEnsureTemplateAfterInterruptedBuild: an unsealed leftover of a build the
// node-manager did not finish is removed and the template built again.
func TestEnsureTemplateAfterInterruptedBuild(t *testing.T) {
	c, st, _ := startServer(t)
	if err := os.MkdirAll(filepath.Join(st.dir, "t-half"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnsureTemplate(context.Background(), "half", "builtin:minimal"); err != nil {
		t.Fatalf("EnsureTemplate over an unfinished build: %v", err)
	}
	if !st.hasTemplate("half") {
		t.Error("template not sealed")
	}
}

// TestRuntimeNotReadyIsUnavailable: cleaning up an execution of a runtime
// whose driver has not joined yet must not be reported done by the others.
func TestRuntimeNotReadyIsUnavailable(t *testing.T) {
	c, _, _ := startServer(t)
	err := c.Cleanup(context.Background(), "sb1-g1-vm", "vm")
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Cleanup with the vm driver not ready = %v, want unavailable", err)
	}
}

// TestCleanupWaitsForAStartTheCallerGaveUpOn: a caller that stops waiting
// for a start (its context ends; the node's request was cut) does not stop
// it in the node-manager, and the cleanup the caller sends next waits for
// that start to finish and then undoes all of it: nothing is left for a
// later start of the same execution to trip over.
func TestCleanupWaitsForAStartTheCallerGaveUpOn(t *testing.T) {
	c, st, drv := startServer(t)
	ctx := context.Background()
	if _, err := c.EnsureTemplate(ctx, "minimal", "builtin:minimal"); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open) // a failure below must not leave the server's start waiting
	drv.mu.Lock()
	drv.gate, drv.entered = gate, make(chan string, 1)
	drv.mu.Unlock()
	args := privop.StartArgs{ExecID: "sb1-g1-abc", SandboxID: "sb1", Template: "minimal", Runtime: "ns", Hostname: "sb1", CPUs: 1, MemoryMiB: 256, PidsMax: 256}
	sctx, cancel := context.WithCancel(ctx)
	startErr := make(chan error, 1)
	go func() {
		_, ch, _, err := c.Start(sctx, args)
		if ch != nil {
			ch.Close()
		}
		startErr <- err
	}()
	<-drv.entered // the start is under way in the node-manager
	cancel()
	if err := <-startErr; err == nil {
		t.Fatal("a start whose caller gave up reported success")
	}
	cleaned := make(chan error, 1)
	go func() { cleaned <- c.Cleanup(ctx, args.ExecID, "ns") }()
	select {
	case err := <-cleaned:
		t.Fatalf("cleanup returned (%v) while the start it must undo was still under way", err)
	case <-time.After(200 * time.Millisecond):
	}
	open()
	if err := <-cleaned; err != nil {
		t.Fatal(err)
	}
	drv.mu.Lock()
	left := len(drv.peers)
	drv.mu.Unlock()
	clone := st.hasClone(args.ExecID)
	if left != 0 || clone {
		t.Fatalf("after the cleanup: %d executions and clone %v left by the abandoned start", left, clone)
	}
	// The same execution starts cleanly again.
	drv.mu.Lock()
	drv.gate = nil
	drv.mu.Unlock()
	_, ch, _, err := c.Start(ctx, args)
	if err != nil {
		t.Fatalf("start again: %v", err)
	}
	ch.Close()
}

// TestListExecutions: the node-manager lists what its runtimes hold, with
// the runtime of each, and the runtimes still being set up.
func TestListExecutions(t *testing.T) {
	c, _, _ := startServer(t)
	ctx := context.Background()
	if _, err := c.EnsureTemplate(ctx, "minimal", "builtin:minimal"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sb2-g1-b", "sb1-g1-a"} {
		_, ch, _, err := c.Start(ctx, privop.StartArgs{ExecID: id, SandboxID: strings.SplitN(id, "-", 2)[0], Template: "minimal", Runtime: "ns", Hostname: "h", CPUs: 1, MemoryMiB: 256, PidsMax: 256})
		if err != nil {
			t.Fatal(err)
		}
		ch.Close()
	}
	if err := c.Cleanup(ctx, "sb2-g1-b", "ns"); err != nil {
		t.Fatal(err)
	}
	got, err := c.ListExecutions(ctx)
	want := []privop.HeldExecution{{ExecID: "sb1-g1-a", Runtime: "ns"}}
	if err != nil || !slices.Equal(got.Executions, want) || len(got.Pending) != 0 {
		t.Errorf("ListExecutions = %+v, %v; want %v and nothing pending", got, err, want)
	}
}

// TestListLeftoverVolumes: a root volume no runtime holds (a node-manager
// killed between the clone and the runtime's state, or during a cleanup)
// is listed as volume-only, and a cleanup with no runtime deletes it.
func TestListLeftoverVolumes(t *testing.T) {
	c, st, _ := startServer(t)
	ctx := context.Background()
	if _, err := c.EnsureTemplate(ctx, "minimal", "builtin:minimal"); err != nil {
		t.Fatal(err)
	}
	_, ch, _, err := c.Start(ctx, privop.StartArgs{ExecID: "sb1-g1-a", SandboxID: "sb1", Template: "minimal", Runtime: "ns", Hostname: "h", CPUs: 1, MemoryMiB: 256, PidsMax: 256})
	if err != nil {
		t.Fatal(err)
	}
	ch.Close()
	if _, err := st.Clone(ctx, "minimal", "sb2-g1-left"); err != nil {
		t.Fatal(err)
	}
	st.Clone(ctx, "minimal", "Not_An_Exec_ID")
	got, err := c.ListExecutions(ctx)
	want := []privop.HeldExecution{{ExecID: "sb1-g1-a", Runtime: "ns"}, {ExecID: "sb2-g1-left", VolumeOnly: true}}
	if err != nil || !slices.Equal(got.Executions, want) {
		t.Fatalf("ListExecutions = %+v, %v; want %v", got, err, want)
	}
	if err := c.Cleanup(ctx, "sb2-g1-left", ""); err != nil {
		t.Fatalf("cleanup of the leftover volume: %v", err)
	}
	if vols, _ := st.Volumes(ctx); slices.Contains(vols, "sb2-g1-left") {
		t.Errorf("volumes after the cleanup: %v; want sb2-g1-left deleted", vols)
	}
}

package e2bapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// blockingBackend is an imagebuild.Backend whose build sandbox runs an
// exec that ends only when its ctx does; it records the deletions.
type blockingBackend struct {
	started chan struct{}
	runtime string     // of the build sandbox's create
	mu      sync.Mutex // guards deleted
	deleted []string
}

func (b *blockingBackend) TemplateTaken(context.Context, string) (bool, error) { return false, nil }
func (b *blockingBackend) CreateSandbox(_ context.Context, req sandboxv1.CreateSandboxRequest) (string, error) {
	b.runtime = req.Runtime
	return "sb1", nil
}
func (b *blockingBackend) ForkSandbox(context.Context, string, string, string) (string, error) {
	return "", errors.New("no fork")
}
func (b *blockingBackend) DeleteSandbox(ctx context.Context, id string) error {
	if ctx.Err() != nil {
		return ctx.Err() // a cancelled cleanup would leave the sandbox
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deleted = append(b.deleted, id)
	return nil
}
func (b *blockingBackend) Exec(ctx context.Context, id string, start sandboxv1.ExecStart, stdout, stderr io.Writer) (int, error) {
	close(b.started)
	<-ctx.Done()
	return 0, ctx.Err()
}
func (b *blockingBackend) WriteFile(context.Context, string, string, io.Reader) error { return nil }
func (b *blockingBackend) Snapshot(context.Context, string, string) (string, error) {
	return "", errors.New("no snapshot")
}
func (b *blockingBackend) DeleteSnapshot(context.Context, string, string) error { return nil }
func (b *blockingBackend) BuildTemplate(context.Context, sandboxv1.BuildTemplateRequest) (*sandboxv1.Template, error) {
	return nil, errors.New("no template")
}

// TestStopBuildsRemovesSandbox: StopBuilds cancels a running build, waits
// for it, and the build has removed its sandbox (with a context that was
// not cancelled) and ended in error. The build sandbox was created on the
// server's default runtime.
func TestStopBuildsRemovesSandbox(t *testing.T) {
	a := &API{host: statusHost{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), builds: newTemplateBuilds(), filesDir: t.TempDir()}
	tb, err := a.builds.add(context.Background(), newBuild{tenant: "t1", alias: "x"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	spec := templateSpec{FromTemplate: "minimal", Steps: []templateStep{{Type: "RUN", Args: []string{"sleep 1000"}}}}
	df, _, err := dockerfileOf(spec)
	if err != nil {
		t.Fatal(err)
	}
	fb := &blockingBackend{started: make(chan struct{})}
	tb.status = buildBuilding
	a.builds.wg.Add(1)
	go func() {
		defer a.builds.wg.Done()
		a.runBuild(a.builds.ctx, fb, tb, spec, df, false)
	}()
	<-fb.started
	stopped := make(chan struct{})
	go func() { a.StopBuilds(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("StopBuilds did not return: the build goes on")
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if len(fb.deleted) != 1 || fb.deleted[0] != "sb1" {
		t.Errorf("deleted sandboxes %v, want [sb1]", fb.deleted)
	}
	if fb.runtime != "" {
		t.Errorf("build sandbox created on runtime %q, want the server's default (\"\"), so vm-only nodes build", fb.runtime)
	}
	if tb.status != buildError || tb.reason == nil || tb.reason.Step != "1" {
		t.Errorf("status %s reason %+v, want error at step 1", tb.status, tb.reason)
	}
}

package service

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/scheduler"
	"github.com/spacesandbox/space/internal/store"
)

// raceNode is a node for the concurrency model test: it keeps the
// executions it was asked to run the way the real node does (a start of
// generation g retires the sandbox's older ones, node/leases.go; start, stop
// and snapshot are idempotent per id) and records every activation that a
// correct control plane never makes: a start of an older generation than
// one already started (a stale replica's), or a start of an execution that
// was stopped (a zombie brought back).
type raceNode struct {
	mu    sync.Mutex // guards everything below
	execs map[string]*raceExec
	// newest is the highest generation started per sandbox.
	newest    map[string]uint64
	snapshots map[string]bool
	// objects is the object store hibernations upload to.
	objects objstore.Store
	// violations are the activations that must never happen.
	violations []string
}

// raceExec is one execution the node holds.
type raceExec struct {
	nodev1.Execution
	paused  bool
	stopped bool
	retired bool
}

func (e *raceExec) live() bool { return !e.stopped && !e.retired }

func newRaceNode(objects objstore.Store) *raceNode {
	return &raceNode{execs: map[string]*raceExec{}, newest: map[string]uint64{}, snapshots: map[string]bool{}, objects: objects}
}

// adopt makes the node hold a running execution, started now.
func (n *raceNode) adopt(ex nodev1.Execution) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ex.State, ex.StartedAt = nodev1.ExecRunning, time.Now()
	n.execs[ex.ExecID] = &raceExec{Execution: ex}
	n.newest[ex.SandboxID] = max(n.newest[ex.SandboxID], ex.Generation)
}

func (n *raceNode) Start(ctx context.Context, req nodev1.StartExecution) (*nodev1.Execution, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ex, ok := n.execs[req.ExecID]; ok {
		if ex.stopped || ex.retired {
			n.violations = append(n.violations, fmt.Sprintf("start of execution %s (generation %d) after it was stopped or retired", req.ExecID, req.Generation))
			return nil, fmt.Errorf("race node: execution %s is gone: %w", req.ExecID, errdefs.ErrFailedPrecondition)
		}
		out := ex.Execution
		return &out, nil
	}
	if req.Snapshot != "" && !n.snapshots[req.Snapshot] {
		return nil, fmt.Errorf("race node: start %s from snapshot %s: not on this node: %w", req.ExecID, req.Snapshot, errdefs.ErrFailedPrecondition)
	}
	if newest := n.newest[req.SandboxID]; req.Generation < newest {
		n.violations = append(n.violations, fmt.Sprintf("start of execution %s of generation %d after generation %d started", req.ExecID, req.Generation, newest))
	}
	for _, ex := range n.execs {
		if ex.SandboxID == req.SandboxID && ex.Generation < req.Generation {
			ex.retired = true
		}
	}
	ex := &raceExec{Execution: nodev1.Execution{
		ExecID: req.ExecID, SandboxID: req.SandboxID, Generation: req.Generation, ActivationID: req.ActivationID,
		Runtime: req.Runtime, Template: req.Template, State: nodev1.ExecRunning, StartedAt: time.Now(),
	}}
	n.execs[req.ExecID] = ex
	n.newest[req.SandboxID] = max(n.newest[req.SandboxID], req.Generation)
	out := ex.Execution
	return &out, nil
}

func (n *raceNode) Stop(ctx context.Context, execID string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ex, ok := n.execs[execID]; ok {
		ex.stopped = true
	}
	return nil
}

// liveExec returns execution id when it is live.
func (n *raceNode) liveExec(id string) (*raceExec, error) {
	ex, ok := n.execs[id]
	if !ok || !ex.live() {
		return nil, fmt.Errorf("race node: execution %s: %w", id, errdefs.ErrNotFound)
	}
	return ex, nil
}

func (n *raceNode) Pause(ctx context.Context, execID string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	ex, err := n.liveExec(execID)
	if err == nil {
		ex.paused = true
	}
	return err
}

func (n *raceNode) Resume(ctx context.Context, execID string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	ex, err := n.liveExec(execID)
	if err == nil {
		ex.paused = false
	}
	return err
}

func (n *raceNode) Snapshot(ctx context.Context, execID string, req nodev1.TakeSnapshot) (*nodev1.Snapshot, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.liveExec(execID); err != nil {
		return nil, err
	}
	n.snapshots[req.SnapshotID] = true
	return &nodev1.Snapshot{ID: req.SnapshotID, Kind: req.Kind, SizeBytes: 4096, CreatedAt: time.Now()}, nil
}

func (n *raceNode) DeleteSnapshot(ctx context.Context, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.snapshots, id)
	return nil
}

// Upload stores snapshot id in the object store as one object.
func (n *raceNode) Upload(ctx context.Context, id string, req nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
	n.mu.Lock()
	held := n.snapshots[id]
	n.mu.Unlock()
	if !held {
		return nil, fmt.Errorf("race node: upload %s: not on this node: %w", id, errdefs.ErrNotFound)
	}
	key, content := req.Prefix+"disk.enc", "disk of "+id
	info, err := n.objects.Put(ctx, key, strings.NewReader(content), int64(len(content)))
	if err != nil {
		return nil, fmt.Errorf("race node: upload %s: %w", id, err)
	}
	obj := nodev1.Object{Name: "disk.enc", Key: key, Size: info.Size, Digest: info.Digest, AAD: "aad-" + key}
	return &nodev1.Artifacts{Export: json.RawMessage(`{"v":1}`), Objects: []nodev1.Object{obj}, PlainBytes: info.Size, StoredBytes: info.Size}, nil
}

// Download brings snapshot id back from the object store.
func (n *raceNode) Download(ctx context.Context, id string, req nodev1.DownloadSnapshot) (*nodev1.Snapshot, error) {
	for _, obj := range req.Artifacts.Objects {
		if err := objstore.Verify(ctx, n.objects, obj.Key, objstore.Info{Key: obj.Key, Size: obj.Size, Digest: obj.Digest}); err != nil {
			return nil, fmt.Errorf("race node: download %s: %w", id, err)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.snapshots[id] = true
	return &nodev1.Snapshot{ID: id, SizeBytes: 4096}, nil
}

func (n *raceNode) EnsureTemplate(ctx context.Context, name, source string) (*nodev1.TemplateReady, error) {
	return &nodev1.TemplateReady{Name: name}, nil
}

// ListSandbox is what the node runs now for one sandbox (the reconciler's
// stopPrevious asks).
func (n *raceNode) ListSandbox(ctx context.Context, sandboxID string) ([]nodev1.Execution, error) {
	var out []nodev1.Execution
	for _, ex := range n.report() {
		if ex.SandboxID == sandboxID {
			out = append(out, ex)
		}
	}
	return out, nil
}

// report is the node's heartbeat: its live executions.
func (n *raceNode) report() []nodev1.Execution {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []nodev1.Execution
	for _, ex := range n.execs {
		if ex.live() {
			out = append(out, ex.Execution)
		}
	}
	return out
}

// live returns the live executions of sandbox id, as "exec" or
// "exec(paused)", sorted.
func (n *raceNode) live(id string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, ex := range n.execs {
		if ex.SandboxID == id && ex.live() {
			s := ex.ExecID
			if ex.paused {
				s += "(paused)"
			}
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// takeViolations returns the violations recorded so far and forgets them.
func (n *raceNode) takeViolations() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	v := n.violations
	n.violations = nil
	return v
}

var _ reconcile.NodeAPI = (*raceNode)(nil)

// announcingStore is the SQLite store with the ability PostgreSQL gives
// replicas sharing it (store.SandboxChanges, its trigger and NOTIFY): every
// write of a sandbox row is announced to every watcher, whichever replica
// made it.
type announcingStore struct {
	store.Store

	mu       sync.Mutex // guards watchers
	watchers map[*func(string)]struct{}
}

func newAnnouncingStore(st store.Store) *announcingStore {
	return &announcingStore{Store: st, watchers: map[*func(string)]struct{}{}}
}

// WatchSandboxChanges implements store.SandboxChanges.
func (s *announcingStore) WatchSandboxChanges(ctx context.Context, changed func(id string), missed func(cause error)) error {
	missed(nil)
	s.mu.Lock()
	s.watchers[&changed] = struct{}{}
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	delete(s.watchers, &changed)
	s.mu.Unlock()
	return nil
}

func (s *announcingStore) announce(id string, err error) error {
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		(*w)(id)
	}
	return nil
}

func (s *announcingStore) CreateSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	return s.announce(sb.ID, s.Store.CreateSandbox(ctx, sb))
}

func (s *announcingStore) UpdateSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	return s.announce(sb.ID, s.Store.UpdateSandbox(ctx, sb))
}

func (s *announcingStore) UpdateSandboxWithinQuota(ctx context.Context, sb *sandbox.Sandbox) error {
	return s.announce(sb.ID, s.Store.UpdateSandboxWithinQuota(ctx, sb))
}

func (s *announcingStore) DeleteSandbox(ctx context.Context, id string) error {
	return s.announce(id, s.Store.DeleteSandbox(ctx, id))
}

var _ store.SandboxChanges = (*announcingStore)(nil)

// raceBeats is the heartbeats a restore's placement reads: the node has no
// runtimes coming up and no warm executions.
type raceBeats struct{}

func (raceBeats) PendingRuntimes(string) []string         { return nil }
func (raceBeats) WarmNodes(nodev1.PoolKey) map[string]int { return nil }
func (raceBeats) NodeMemory() map[string]scheduler.Memory { return nil }

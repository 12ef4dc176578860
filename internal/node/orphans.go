package node

// Orphans: executions a runtime of this node holds (driver state, a running
// VMM or sandbox) that no runtime record of the node refers to. They serve
// nobody (the node routes only to executions it has a record of) and would
// hold memory, CPU and disk forever: a crash between a runtime's start and
// the record's removal, a node whose records were deleted, a node-manager
// shared by two data directories.
//
// CollectOrphans finds them and, asked to, cleans them up through the
// node-manager. It lists the runtimes' executions first and the records
// after: the node creates an execution's record directory before it asks for
// the start (Start, prepare) and removes it only after the cleanup
// (teardown), so an execution listed before the records were read and still
// running has its directory by then. Each one found is judged again under
// its execution lock, which the start, the claim of a prepared execution and
// the teardown hold, before it is cleaned.
//
// At start the node only logs what it finds (LogOrphans), never cleans it:
// the records live on the node's data directory, and a node started on the
// wrong or a not-yet-mounted data directory, or beside another node on one
// node-manager, would see every live sandbox as an orphan. Sandboxes outlive
// their server by design; killing one cannot be undone, whereas an orphan
// left running until an operator runs `space node gc` costs only resources.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/privop"
)

// CollectOrphans finds the executions no runtime record refers to and,
// unless dryRun, stops and cleans up each; a cleanup that fails is reported
// in its entry.
func (m *Manager) CollectOrphans(ctx context.Context, dryRun bool) (*nodev1.Orphans, error) {
	held, err := m.cfg.Privileged.ListExecutions(ctx)
	if err != nil {
		return nil, fmt.Errorf("orphans: list the runtimes' executions: %w", err)
	}
	known, err := m.knownExecutions()
	if err != nil {
		return nil, err
	}
	out := &nodev1.Orphans{Orphans: []nodev1.Orphan{}, Pending: held.Pending}
	for _, h := range held.Executions {
		if known[h.ExecID] {
			continue
		}
		o := nodev1.Orphan{ExecID: h.ExecID, Runtime: h.Runtime, VolumeOnly: h.VolumeOnly}
		if !dryRun {
			still, cerr := m.cleanOrphan(ctx, h)
			if !still {
				continue // a record appeared, or it went, meanwhile
			}
			o.Cleaned = cerr == nil
			if cerr != nil {
				o.Error = cerr.Error()
			}
		}
		out.Orphans = append(out.Orphans, o)
	}
	return out, nil
}

// cleanOrphan cleans h up if, under its execution lock, still no record
// refers to it and the runtime still holds it; false means a record
// appeared or the execution went (a teardown that held the lock).
func (m *Manager) cleanOrphan(ctx context.Context, h privop.HeldExecution) (bool, error) {
	unlock := m.locks.Lock(h.ExecID)
	defer unlock()
	known, err := m.knownExecutions()
	if err != nil {
		return true, err
	}
	if known[h.ExecID] {
		return false, nil
	}
	held, err := m.cfg.Privileged.ListExecutions(ctx)
	if err != nil {
		return true, fmt.Errorf("exec %s: list the runtimes' executions: %w", h.ExecID, err)
	}
	if !slices.Contains(held.Executions, h) {
		return false, nil
	}
	if h.VolumeOnly {
		m.log.Warn("deleting a root volume no runtime holds and no runtime record refers to", "exec", h.ExecID)
	} else {
		m.log.Warn("stopping an execution no runtime record refers to", "exec", h.ExecID, "runtime", h.Runtime)
	}
	if err := m.cfg.Privileged.Cleanup(ctx, h.ExecID, h.Runtime); err != nil {
		return true, fmt.Errorf("exec %s: cleanup: %w", h.ExecID, err)
	}
	return true, nil
}

// knownExecutions returns the ids the node-manager may know this node's
// executions by: every record directory's name (a directory whose record
// is not written yet belongs to a start under way), the execution and
// physical id of every record, and the starts under way.
func (m *Manager) knownExecutions() (map[string]bool, error) {
	known := map[string]bool{}
	m.mu.Lock()
	for id := range m.starting {
		known[id] = true
	}
	m.mu.Unlock()
	entries, err := os.ReadDir(m.records.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("orphans: list the runtime records: %w", err)
	}
	for _, e := range entries {
		known[e.Name()] = true
		if rec, err := m.records.loadAny(e.Name()); err == nil {
			known[rec.ExecID] = true
			known[rec.physicalID()] = true
		}
	}
	return known, nil
}

// LogOrphans logs the executions no runtime record refers to, once the
// node-manager answers and has every runtime ready (or after a few
// minutes of waiting for them), and cleans up none (see the top of this
// file). It returns when it has logged or ctx is done.
func (m *Manager) LogOrphans(ctx context.Context) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		found, err := m.CollectOrphans(ctx, true)
		if err == nil && (len(found.Pending) == 0 || time.Now().After(deadline)) {
			for _, o := range found.Orphans {
				if o.VolumeOnly {
					m.log.Warn("a root volume no runtime holds and no runtime record refers to is left on this node: `space node gc` deletes it", "exec", o.ExecID)
					continue
				}
				m.log.Warn("an execution no runtime record refers to runs on this node: `space node gc` stops it", "exec", o.ExecID, "runtime", o.Runtime)
			}
			if len(found.Pending) > 0 {
				m.log.Info("executions of runtimes not ready were not looked at for orphans", "runtimes", found.Pending)
			}
			return
		}
		if err != nil && time.Now().After(deadline) {
			m.log.Warn("could not look for executions no runtime record refers to", "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

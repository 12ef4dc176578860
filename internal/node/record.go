package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/privop"
)

// Record is the node-local runtime record of one execution: what the node
// installed, persisted so a restarted node reattaches to the execution's host
// bridge instead of losing it.
type Record struct {
	nodev1.StartExecution
	SandboxPid       int       `json:"sandbox_pid"`
	SandboxStartTime uint64    `json:"sandbox_start_time"`
	BridgePid        int       `json:"bridge_pid"`
	BridgeStartTime  uint64    `json:"bridge_start_time"`
	StartedAt        time.Time `json:"started_at"`

	// BridgeExeDev and BridgeExeIno identify the executable the bridge
	// process runs (stat of /proc/<pid>/exe right after it started), checked
	// on every connection. Zero in records written before they existed:
	// then that one check is skipped.
	BridgeExeDev uint64 `json:"bridge_exe_dev,omitempty"`
	BridgeExeIno uint64 `json:"bridge_exe_ino,omitempty"`
	// Starting is set from the record's first save, right after the
	// runtime started the execution, until its guest has the sandbox's
	// identity (start). A record still Starting when a node starts is an
	// execution whose start was cut short by the node's death: its bridge
	// may admit nothing (no identity yet), so the node finishes the start
	// (FinishInterruptedStarts) before it serves. Absent in records
	// written before it existed: those are complete.
	Starting bool `json:"starting,omitempty"`
	// startNotReady is what this process's start of the execution learnt
	// of the template's start command (Execution.StartNotReady); not saved:
	// only the answer to that Start carries it, so the server records it
	// once.
	startNotReady string
	// Paused is set while the execution is paused (its guest cannot answer).
	Paused bool `json:"paused,omitempty"`
	// Fenced is set (with Paused) on an execution the node froze when its
	// heartbeat lease ended (fence.go); only the control plane thaws it.
	Fenced bool `json:"fenced,omitempty"`
	// RetiredBy is the generation that replaced this execution once the
	// node learnt of it (0: current). A retired execution's capabilities
	// are refused with RefreshRoute.
	RetiredBy uint64 `json:"retired_by,omitempty"`
	// Retired is set when the sandbox is gone or replaced (RetiredBy may
	// be 0 when it was deleted).
	Retired bool `json:"retired,omitempty"`

	// Physical is the id the node-manager and its runtime know the
	// execution by, when it is not ExecID: a warm-pool execution keeps the
	// id it was prepared under after a sandbox claims it (its cgroup, root
	// volume and VMM are named by it). Empty: ExecID.
	Physical string `json:"physical,omitempty"`
	// Pool marks a prepared execution of the warm pool that no sandbox has
	// claimed: it serves nobody, holds no identity and is never reported.
	Pool bool `json:"pool,omitempty"`
	// PoolVersion is the template build a pooled execution was prepared from.
	PoolVersion string `json:"pool_version,omitempty"`
	// Warm is set on an execution claimed from the warm pool.
	Warm bool `json:"warm,omitempty"`
}

// physicalID is the id to give the node-manager for rec's execution.
func (rec *Record) physicalID() string {
	if rec.Physical != "" {
		return rec.Physical
	}
	return rec.ExecID
}

// records stores one directory per execution under dir.
type records struct {
	dir   string
	cache *recordCache // nil: loadShared reads the file every time
}

func (r records) execDir(id string) string { return filepath.Join(r.dir, id) }
func (r records) socket(id string) string  { return filepath.Join(r.execDir(id), "bridge.sock") }
func (r records) exitFile(id string) string {
	return filepath.Join(r.execDir(id), "bridge.exit")
}
func (r records) logFile(id string) string { return filepath.Join(r.execDir(id), "bridge.log") }

func (r records) save(rec *Record) error { return r.saveIn(rec.ExecID, rec) }

// saveIn writes rec into the directory of execution dirID, which is
// rec.ExecID except while a claim of a prepared execution moves it.
func (r records) saveIn(dirID string, rec *Record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	dir := r.execDir(dirID)
	tmp := filepath.Join(dir, "record.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("runtime record %s: %w", rec.ExecID, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "record.json")); err != nil {
		return fmt.Errorf("runtime record %s: %w", rec.ExecID, err)
	}
	return nil
}

func (r records) load(id string) (*Record, error) {
	rec, err := r.loadAny(id)
	if err != nil {
		return nil, err
	}
	if rec.ExecID != id {
		return nil, fmt.Errorf("runtime record %s names exec %q", id, rec.ExecID)
	}
	return rec, nil
}

// loadAny reads the record in the directory of id, whichever execution it
// names.
func (r records) loadAny(id string) (*Record, error) {
	b, err := os.ReadFile(filepath.Join(r.execDir(id), "record.json"))
	if err != nil {
		return nil, err
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("runtime record %s: %w", id, err)
	}
	return &rec, nil
}

// all loads every record; unreadable ones are returned as errors beside.
func (r records) all() ([]*Record, []error) {
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, []error{err}
	}
	var out []*Record
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || privop.ValidExecID(e.Name()) != nil {
			continue
		}
		rec, err := r.load(e.Name())
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		out = append(out, rec)
	}
	return out, errs
}

func (r records) remove(id string) error {
	r.cache.forget(id)
	return os.RemoveAll(r.execDir(id))
}

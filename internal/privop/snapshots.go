package privop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Node-local snapshots. Each lives in Config.SnapshotDir/<id>:
//
//	meta.json     SnapshotInfo, written last: a directory without it is an
//	              interrupted snapshot, removed and redone on the next request
//	disk.img      a vm disk snapshot (reflink of the running VM's disk)
//	checkpoint/   a vm full snapshot (driver.Checkpoint: memory, devices, disk)
//
// An ns snapshot's tree is a volume snapshot of the same id in Storage.

// Snapshot kinds.
const (
	// SnapshotDisk is the root filesystem alone, taken while the sandbox runs.
	SnapshotDisk = "disk"
	// SnapshotFull is memory, device state and disk: the VM resumes from it
	// exactly where it was.
	SnapshotFull = "full"
)

const (
	snapshotMeta       = "meta.json"
	snapshotDiskImage  = "disk.img"
	snapshotCheckpoint = "checkpoint"
)

// SnapshotArgs asks for a snapshot of a running or paused execution.
type SnapshotArgs struct {
	SnapshotID string `json:"snapshot_id"`
	ExecID     string `json:"exec_id"`
	Runtime    string `json:"runtime"`
	// Kind is SnapshotDisk or SnapshotFull.
	Kind string `json:"kind"`
	// SandboxID and Template are recorded in the snapshot's metadata.
	SandboxID string `json:"sandbox_id"`
	Template  string `json:"template"`
	// LeavePaused keeps the VM paused after a full snapshot (hibernate and
	// stop tear it down next); otherwise it continues.
	LeavePaused bool `json:"leave_paused,omitempty"`
}

// SnapshotInfo describes a snapshot on the node.
type SnapshotInfo struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	Runtime   string    `json:"runtime"`
	SandboxID string    `json:"sandbox_id"`
	Template  string    `json:"template"`
	CreatedAt time.Time `json:"created_at"`
	// SizeBytes is what the snapshot's files hold (data, not holes).
	SizeBytes int64 `json:"size_bytes"`
	// MemoryMiB and CPUs are the size of a full snapshot's VM; a restore
	// must ask for the same.
	MemoryMiB int `json:"memory_mib,omitempty"`
	CPUs      int `json:"cpus,omitempty"`
}

// ValidSnapshotID reports whether id is a well-formed snapshot id.
func ValidSnapshotID(id string) error {
	if !execIDPattern.MatchString(id) {
		return invalid("snapshot id %q: want 1-64 of [a-z0-9-], starting with a letter or digit", id)
	}
	return nil
}

func (a *SnapshotArgs) validate() error {
	if a == nil {
		return invalid("snapshot: missing arguments")
	}
	if err := ValidSnapshotID(a.SnapshotID); err != nil {
		return err
	}
	if err := ValidExecID(a.ExecID); err != nil {
		return err
	}
	if a.Kind != SnapshotDisk && a.Kind != SnapshotFull {
		return invalid("snapshot kind %q: want disk or full", a.Kind)
	}
	if !execIDPattern.MatchString(a.SandboxID) {
		return invalid("sandbox id %q is malformed", a.SandboxID)
	}
	return ValidTemplateName(a.Template)
}

func (s *Server) snapshotDir(id string) (string, error) {
	if s.cfg.SnapshotDir == "" {
		return "", fmt.Errorf("%w: this node-manager keeps no snapshots (no snapshot directory configured)", errdefs.ErrFailedPrecondition)
	}
	if err := ValidSnapshotID(id); err != nil {
		return "", err
	}
	return filepath.Join(s.cfg.SnapshotDir, id), nil
}

// snapshot takes a snapshot of an execution. Repeating a request whose
// snapshot exists returns it; an interrupted one is removed and redone.
func (s *Server) snapshot(ctx context.Context, a *SnapshotArgs) (*SnapshotInfo, error) {
	if err := a.validate(); err != nil {
		return nil, err
	}
	dir, err := s.snapshotDir(a.SnapshotID)
	if err != nil {
		return nil, err
	}
	if info, err := readSnapshotInfo(dir); err == nil {
		if info.SandboxID != a.SandboxID || info.Kind != a.Kind {
			return nil, fmt.Errorf("%w: snapshot %s exists for another sandbox or kind", errdefs.ErrConflict, a.SnapshotID)
		}
		return info, nil
	}
	drivers, err := s.driversFor(a.ExecID, a.Runtime)
	if err != nil {
		return nil, err
	}
	if len(drivers) != 1 || drivers[0].Name() != a.Runtime {
		return nil, invalid("snapshot: runtime %q of exec %s is not on this node", a.Runtime, a.ExecID)
	}
	d := drivers[0]
	if alive, err := d.Alive(ctx, a.ExecID); err != nil || !alive {
		return nil, fmt.Errorf("%w: exec %s is not running (%v)", errdefs.ErrFailedPrecondition, a.ExecID, err)
	}
	if err := s.removeSnapshot(ctx, a.SnapshotID); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.cfg.SnapshotDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", a.SnapshotID, err)
	}
	info := &SnapshotInfo{ID: a.SnapshotID, Kind: a.Kind, Runtime: a.Runtime, SandboxID: a.SandboxID, Template: a.Template, CreatedAt: time.Now().UTC()}
	if err := s.takeSnapshot(ctx, d, a, dir, info); err != nil {
		_ = s.removeSnapshot(context.WithoutCancel(ctx), a.SnapshotID)
		return nil, fmt.Errorf("snapshot %s of exec %s: %w", a.SnapshotID, a.ExecID, err)
	}
	if err := writeSnapshotInfo(dir, info); err != nil {
		_ = s.removeSnapshot(context.WithoutCancel(ctx), a.SnapshotID)
		return nil, err
	}
	s.log.Info("snapshot taken", "snapshot", a.SnapshotID, "exec", a.ExecID, "kind", a.Kind, "bytes", info.SizeBytes)
	return info, nil
}

func (s *Server) takeSnapshot(ctx context.Context, d driver.Driver, a *SnapshotArgs, dir string, info *SnapshotInfo) error {
	switch {
	case a.Kind == SnapshotFull:
		cpr, ok := d.(driver.Checkpointer)
		if !ok {
			return fmt.Errorf("%w: the %s runtime cannot save memory (it shares the host kernel); take a disk snapshot", errdefs.ErrFailedPrecondition, a.Runtime)
		}
		cp, err := cpr.Checkpoint(ctx, a.ExecID, filepath.Join(dir, snapshotCheckpoint))
		if err != nil {
			return err
		}
		if !a.LeavePaused {
			if p, ok := d.(driver.Pauser); ok {
				if err := p.Resume(ctx, a.ExecID); err != nil {
					return fmt.Errorf("resume after the snapshot: %w", err)
				}
			}
		}
		info.MemoryMiB, info.CPUs = cp.MemoryMiB, cp.CPUs
		for _, f := range cp.Files {
			info.SizeBytes += f.Size
		}
		return nil
	case s.cfg.ImageRuntimes[a.Runtime]:
		ds, ok := d.(driver.DiskSnapshotter)
		if !ok {
			return fmt.Errorf("%w: the %s runtime cannot snapshot its disk", errdefs.ErrFailedPrecondition, a.Runtime)
		}
		img := filepath.Join(dir, snapshotDiskImage)
		if err := ds.SnapshotDisk(ctx, a.ExecID, img); err != nil {
			return err
		}
		info.SizeBytes = allocated(img)
		return nil
	default:
		p, err := s.cfg.Storage.Snapshot(ctx, a.ExecID, a.SnapshotID)
		if err != nil {
			return err
		}
		info.SizeBytes = dirSize(p)
		return nil
	}
}

// allocated is the space a file's data takes (not its holes).
func allocated(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(interface{ Blocks() int64 }); ok {
		return st.Blocks() * 512
	}
	return fi.Size()
}

// removeSnapshot deletes a snapshot's files, wherever they are. A missing
// snapshot is a success.
func (s *Server) removeSnapshot(ctx context.Context, id string) error {
	dir, err := s.snapshotDir(id)
	if err != nil {
		return err
	}
	var errs []error
	if err := s.cfg.Storage.DeleteSnapshot(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("snapshot %s: delete: %w", id, err)
	}
	return nil
}

func (s *Server) deleteSnapshot(ctx context.Context, id string) error {
	if err := ValidSnapshotID(id); err != nil {
		return err
	}
	return s.removeSnapshot(ctx, id)
}

// listSnapshots lists the complete snapshots on the node.
func (s *Server) listSnapshots() ([]SnapshotInfo, error) {
	if s.cfg.SnapshotDir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(s.cfg.SnapshotDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []SnapshotInfo
	for _, e := range entries {
		if ValidSnapshotID(e.Name()) != nil {
			continue
		}
		if info, err := readSnapshotInfo(filepath.Join(s.cfg.SnapshotDir, e.Name())); err == nil {
			out = append(out, *info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func readSnapshotInfo(dir string) (*SnapshotInfo, error) {
	f, err := os.Open(filepath.Join(dir, snapshotMeta))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var info SnapshotInfo
	if err := json.NewDecoder(io.LimitReader(f, 1<<16)).Decode(&info); err != nil {
		return nil, fmt.Errorf("snapshot %s: bad %s: %w", filepath.Base(dir), snapshotMeta, err)
	}
	if info.ID != filepath.Base(dir) {
		return nil, fmt.Errorf("snapshot %s: %s names %q", filepath.Base(dir), snapshotMeta, info.ID)
	}
	return &info, nil
}

func writeSnapshotInfo(dir string, info *SnapshotInfo) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, snapshotMeta+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("snapshot %s: %w", info.ID, err)
	}
	return os.Rename(tmp, filepath.Join(dir, snapshotMeta))
}

// snapshotRoot prepares the root of a new execution from a snapshot and says
// how to start it: a root path (a volume clone for ns, the disk image for a
// vm disk snapshot) or a checkpoint to restore (a vm full snapshot).
func (s *Server) snapshotRoot(ctx context.Context, a *StartArgs) (root string, cp *driver.Checkpoint, err error) {
	dir, err := s.snapshotDir(a.Snapshot)
	if err != nil {
		return "", nil, err
	}
	info, err := readSnapshotInfo(dir)
	if err != nil {
		return "", nil, fmt.Errorf("%w: snapshot %s is not on this node", errdefs.ErrFailedPrecondition, a.Snapshot)
	}
	if info.Runtime != a.Runtime {
		return "", nil, fmt.Errorf("%w: snapshot %s was taken on the %s runtime, not %s", errdefs.ErrFailedPrecondition, a.Snapshot, info.Runtime, a.Runtime)
	}
	switch {
	case info.Kind == SnapshotFull:
		cp, err := driver.ReadCheckpoint(filepath.Join(dir, snapshotCheckpoint))
		if err != nil {
			return "", nil, fmt.Errorf("snapshot %s: %w", a.Snapshot, err)
		}
		return "", cp, nil
	case s.cfg.ImageRuntimes[a.Runtime]:
		return filepath.Join(dir, snapshotDiskImage), nil, nil
	default:
		root, err := s.cfg.Storage.CloneSnapshot(ctx, a.Snapshot, a.ExecID)
		return root, nil, err
	}
}

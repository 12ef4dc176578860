package nodemanager

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
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/privop"
)

// Node-local snapshots. Each lives in Config.SnapshotDir/<id>:
//
//	meta.json     SnapshotInfo, written last: a directory without it is an
//	              interrupted snapshot, removed and redone on the next request
//	disk.img      a vm disk snapshot (reflink of the running VM's disk)
//	checkpoint/   a vm full snapshot (driver.Checkpoint: memory, devices, disk)
//
// An ns snapshot's tree is a volume snapshot of the same id in Storage.

const (
	snapshotMeta       = "meta.json"
	snapshotDiskImage  = "disk.img"
	snapshotCheckpoint = "checkpoint"
)

func (s *Server) snapshotDir(id string) (string, error) {
	if s.cfg.SnapshotDir == "" {
		return "", fmt.Errorf("%w: this node-manager keeps no snapshots (no snapshot directory configured)", errdefs.ErrFailedPrecondition)
	}
	if err := privop.ValidSnapshotID(id); err != nil {
		return "", err
	}
	return filepath.Join(s.cfg.SnapshotDir, id), nil
}

// snapshot takes a snapshot of an execution. Repeating a request whose
// snapshot exists returns it; an interrupted one is removed and redone.
func (s *Server) snapshot(ctx context.Context, a *privop.SnapshotArgs) (*privop.SnapshotInfo, error) {
	if err := a.Validate(); err != nil {
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
	// A disk snapshot of a volume-backed execution (ns) copies the volume,
	// which outlives the sandbox's processes: one whose sandbox has exited
	// is kept as they left it (the disk a recovery starts from, a stop that
	// keeps the disk of a sandbox whose guest was killed). Everything else
	// needs the execution running.
	volumeDisk := a.Kind == privop.SnapshotDisk && !s.cfg.ImageRuntimes[a.Runtime]
	alive, err := d.Alive(ctx, a.ExecID)
	if err != nil {
		return nil, fmt.Errorf("%w: exec %s is not running: %v", errdefs.ErrFailedPrecondition, a.ExecID, err)
	} else if !alive && !volumeDisk {
		return nil, fmt.Errorf("%w: exec %s is not running: its sandbox has exited", errdefs.ErrFailedPrecondition, a.ExecID)
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
	info := &privop.SnapshotInfo{ID: a.SnapshotID, Kind: a.Kind, Runtime: a.Runtime, SandboxID: a.SandboxID, Template: a.Template, CreatedAt: time.Now().UTC()}
	if err := s.takeSnapshot(ctx, d, a, dir, info); err != nil {
		_ = s.removeSnapshot(context.WithoutCancel(ctx), a.SnapshotID)
		if !alive && errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: exec %s is not running and has no disk on this node", errdefs.ErrFailedPrecondition, a.ExecID)
		}
		return nil, fmt.Errorf("snapshot %s of exec %s: %w", a.SnapshotID, a.ExecID, err)
	}
	if err := writeSnapshotInfo(dir, info); err != nil {
		_ = s.removeSnapshot(context.WithoutCancel(ctx), a.SnapshotID)
		return nil, err
	}
	failpoint.NodeManagerAfterSnapshotInfo.Hit()
	s.log.Info("snapshot taken", "snapshot", a.SnapshotID, "exec", a.ExecID, "kind", a.Kind, "bytes", info.SizeBytes)
	return info, nil
}

func (s *Server) takeSnapshot(ctx context.Context, d driver.Driver, a *privop.SnapshotArgs, dir string, info *privop.SnapshotInfo) error {
	switch {
	case a.Kind == privop.SnapshotFull:
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
		failpoint.NodeManagerAfterVolumeSnapshot.Hit()
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
	return s.removeSnapshotAt(ctx, id, nil)
}

// removeSnapshotAt is removeSnapshot passing failpoint at once the
// snapshot's volume is gone (nil: none).
func (s *Server) removeSnapshotAt(ctx context.Context, id string, at *failpoint.Point) error {
	dir, err := s.snapshotDir(id)
	if err != nil {
		return err
	}
	var errs []error
	if err := s.cfg.Storage.DeleteSnapshot(ctx, id); err != nil {
		errs = append(errs, err)
	}
	at.Hit()
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("snapshot %s: delete: %w", id, err)
	}
	return nil
}

func (s *Server) deleteSnapshot(ctx context.Context, id string) error {
	if err := privop.ValidSnapshotID(id); err != nil {
		return err
	}
	return s.removeSnapshotAt(ctx, id, failpoint.NodeManagerAfterSnapshotVolumeDelete)
}

// listSnapshots lists the complete snapshots on the node.
func (s *Server) listSnapshots() ([]privop.SnapshotInfo, error) {
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
	var out []privop.SnapshotInfo
	for _, e := range entries {
		if privop.ValidSnapshotID(e.Name()) != nil {
			continue
		}
		if info, err := readSnapshotInfo(filepath.Join(s.cfg.SnapshotDir, e.Name())); err == nil {
			out = append(out, *info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func readSnapshotInfo(dir string) (*privop.SnapshotInfo, error) {
	f, err := os.Open(filepath.Join(dir, snapshotMeta))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var info privop.SnapshotInfo
	if err := json.NewDecoder(io.LimitReader(f, 1<<16)).Decode(&info); err != nil {
		return nil, fmt.Errorf("snapshot %s: bad %s: %w", filepath.Base(dir), snapshotMeta, err)
	}
	if info.ID != filepath.Base(dir) {
		return nil, fmt.Errorf("snapshot %s: %s names %q", filepath.Base(dir), snapshotMeta, info.ID)
	}
	return &info, nil
}

func writeSnapshotInfo(dir string, info *privop.SnapshotInfo) error {
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
func (s *Server) snapshotRoot(ctx context.Context, a *privop.StartArgs) (root string, cp *driver.Checkpoint, err error) {
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
	case info.Kind == privop.SnapshotFull:
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

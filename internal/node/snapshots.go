package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/privop"
)

// Snapshot takes a snapshot of an execution. A disk snapshot of a running VM
// freezes the guest's root filesystem for the moment of the copy (the VM
// keeps running); a paused VM runs for that moment and is paused again (a
// fenced one, which must not run, is copied as it is). Repeating a
// snapshot that exists returns it.
func (m *Manager) Snapshot(ctx context.Context, execID string, req nodev1.TakeSnapshot) (*nodev1.Snapshot, error) {
	if err := validSandboxExecID(execID); err != nil {
		return nil, err
	}
	unlock := m.locks.Lock(execID)
	defer unlock()
	rec, err := m.records.load(execID)
	if err != nil {
		return nil, fmt.Errorf("%w: exec %s is not on this node", errdefs.ErrNotFound, execID)
	}
	if req.Kind == privop.SnapshotFull {
		// A full snapshot is what a restore resumes: an execution whose
		// host bridge is not serving its guest would come back without
		// one, so it is refused rather than acknowledged.
		if err := m.bridgeServing(ctx, rec); err != nil {
			return nil, fmt.Errorf("%w: exec %s: full snapshot refused: %s; stop the sandbox (its disk is kept) or take a disk snapshot", errdefs.ErrFailedPrecondition, execID, err)
		}
	}
	runs := !rec.Paused
	if req.Kind == privop.SnapshotDisk && rec.Runtime == "vm" && rec.Paused && !m.leaseEnded(time.Now()) {
		// A paused guest's page cache holds writes its disk does not have
		// yet (a stop of a paused sandbox lost them): the guest runs for the
		// moment of the freeze, which flushes them, and is paused again.
		// Deferred calls run last first: thaw, then pause.
		if err := m.pauser.Resume(ctx, rec.physicalID(), rec.Runtime); err != nil {
			return nil, fmt.Errorf("exec %s: disk snapshot: run the paused guest to flush its writes: %w", execID, err)
		}
		defer func() {
			if err := m.pauser.Pause(context.WithoutCancel(ctx), rec.physicalID(), rec.Runtime); err != nil {
				m.log.Error("pause again after a paused VM's disk snapshot failed: it runs", "exec", execID, "err", err)
			}
		}()
		runs = true
	}
	if req.Kind == privop.SnapshotDisk && rec.Runtime == "vm" && runs {
		bc, err := m.bridge(rec)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := bc.post(ctx, "/bridge/v1/freeze"); err != nil {
			return nil, fmt.Errorf("exec %s: disk snapshot: %w", execID, err)
		}
		defer func() {
			if err := bc.post(context.WithoutCancel(ctx), "/bridge/v1/thaw"); err != nil {
				m.log.Error("thaw after disk snapshot failed (the bridge thaws it within its limit)", "exec", execID, "err", err)
			}
			m.log.Debug("guest filesystem frozen", "exec", execID, "for", time.Since(t0))
		}()
	}
	info, err := m.cfg.Privileged.Snapshot(ctx, privop.SnapshotArgs{
		SnapshotID:  req.SnapshotID,
		ExecID:      rec.physicalID(),
		Runtime:     rec.Runtime,
		Kind:        req.Kind,
		SandboxID:   rec.SandboxID,
		Template:    rec.Template,
		LeavePaused: req.LeavePaused,
	})
	if err != nil {
		return nil, err
	}
	if req.Kind == privop.SnapshotFull && req.LeavePaused && !rec.Paused {
		rec.Paused = true
		if err := m.records.save(rec); err != nil {
			return nil, err
		}
	}
	out := snapshotOf(*info)
	return &out, nil
}

// DeleteSnapshot removes a snapshot from the node; a missing one succeeds.
func (m *Manager) DeleteSnapshot(ctx context.Context, id string) error {
	return m.cfg.Privileged.DeleteSnapshot(ctx, id)
}

// Snapshots lists the snapshots on the node.
func (m *Manager) Snapshots(ctx context.Context) ([]nodev1.Snapshot, error) {
	infos, err := m.cfg.Privileged.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]nodev1.Snapshot, 0, len(infos))
	for _, info := range infos {
		out = append(out, snapshotOf(info))
	}
	return out, nil
}

func snapshotOf(info privop.SnapshotInfo) nodev1.Snapshot {
	return nodev1.Snapshot{
		ID: info.ID, Kind: info.Kind, Runtime: info.Runtime, SandboxID: info.SandboxID, Template: info.Template,
		CreatedAt: info.CreatedAt, SizeBytes: info.SizeBytes, MemoryMiB: info.MemoryMiB, CPUs: info.CPUs,
	}
}

// bridgeServing checks that rec's host bridge answers and serves its guest.
func (m *Manager) bridgeServing(ctx context.Context, rec *Record) error {
	bc, err := m.bridge(rec)
	if err != nil {
		return err
	}
	st, err := bc.status(ctx)
	if err != nil {
		return errors.New(m.failureReason(rec, err))
	}
	if !st.Ready || st.Reason != "" {
		return fmt.Errorf("host bridge does not serve its guest (ready %t, reason %q)", st.Ready, st.Reason)
	}
	return nil
}

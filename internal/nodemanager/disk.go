package nodemanager

import (
	"context"
	"errors"

	"github.com/spacesandbox/space/internal/privop"
	"github.com/spacesandbox/space/internal/volume"
)

// limitDisk bounds the root volume just made for execution a at its disk
// size (volume.Limiter), before anything runs on it. A store that cannot
// bound volumes (the copy driver, btrfs without quotas) says so once in the
// log, when it is opened, and again here at debug level; the start goes on,
// as it always has there.
func (s *Server) limitDisk(ctx context.Context, a *privop.StartArgs) error {
	l, ok := s.cfg.Storage.(volume.Limiter)
	if !ok {
		return nil
	}
	err := l.Limit(ctx, a.ExecID, a.DiskBytes())
	if errors.Is(err, errors.ErrUnsupported) {
		s.log.Debug("execution's disk is not bounded", "exec", a.ExecID, "why", err)
		return nil
	}
	return err
}

// diskStats adds what execID's root volume is charged, when the store
// accounts it and the execution has a volume (ns; a vm's disk is a file of
// fixed size in its own state, which its driver's Stats reads).
func (s *Server) diskStats(ctx context.Context, execID string, st *privop.Stats) {
	du, ok := s.cfg.Storage.(volume.DiskUser)
	if !ok {
		return
	}
	if u, err := du.DiskUsage(ctx, execID); err == nil {
		st.DiskBytes, st.DiskLimitBytes = u.UsedBytes, u.LimitBytes
	}
}

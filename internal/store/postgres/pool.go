package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spacesandbox/space/internal/errdefs"
)

// The store's connections are a pgxpool.Pool: at most pool_max_conns
// (default 8), each closed after pool_max_conn_lifetime (default 1h, so a
// fail-over's new primary gets its share) or pool_max_conn_idle_time idle
// (default 30m), idle ones checked every pool_health_check_period (default
// 1m); the URL may set any of pgxpool's pool_* parameters. LISTEN and the
// presence lock belong to a session, so the listener and presence keep
// connections of their own outside the pool (notify.go, presence.go).

// pingAfter is how long a connection may sit idle before it is checked with a
// ping on its next use: a server restart or an idle timeout in a proxy closes
// connections without the pool noticing. pgxpool's default, a second, would
// cost a round trip on most requests of a quiet control plane.
const pingAfter = 30 * time.Second

// errClosed is returned by a Store after Close.
var errClosed = fmt.Errorf("postgres: store is closed: %w", errdefs.ErrFailedPrecondition)

// newPool returns the pool of cfg; it dials on first use.
func newPool(cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration >= pingAfter }
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w: %w", errdefs.ErrInvalidArgument, err)
	}
	return p, nil
}

// acquire returns a pooled connection, dialing one when none is idle; the
// caller hands it back with Release.
func (s *Store) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	c, err := s.pool.Acquire(ctx)
	switch {
	case err == nil:
		return c, nil
	case s.closed.Load():
		return nil, errClosed
	case ctx.Err() != nil: // the caller gave up; the server may be fine
		return nil, fmt.Errorf("wait for a connection: %w", ctx.Err())
	}
	return nil, fmt.Errorf("connect: %w: %w", errdefs.ErrUnavailable, err)
}

// discardIdle closes the pooled connections (idle ones now, ones in use
// when they are released). It is called when one turned out closed by the
// server: after a restart or fail-over the others are closed too, and each
// would cost a failed attempt.
func (s *Store) discardIdle() { s.pool.Reset() }

// closeConn closes c, giving the goodbye message a bounded time.
func closeConn(c *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Close(ctx)
}

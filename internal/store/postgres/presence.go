package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// A replica is present while a session of its own holds a session-level
// advisory lock whose key is derived from its replica id. PostgreSQL ends the
// session, and so releases the lock, when it sees the connection close: at
// once when the replica's process dies on a running host (its kernel closes
// the socket), later (TCP keepalive, tcp_keepalives_idle) when the host
// itself vanishes. Other replicas look the lock up in pg_locks, which every
// role may read, without taking it: a try-lock-then-unlock probe would hold
// the lock for a moment, and one left held by a probe whose connection broke
// between the two statements would make a dead replica look present.
//
// The lock lives on a connection of its own, not on the LISTEN connection of
// WatchSandboxChanges: presence must last as long as the reconciler runs,
// whether or not anyone follows changes, and must be re-established at its
// own pace (a silent listening connection is checked after 30 s, presence
// every presencePing). That costs one more connection per replica; it shows
// in pg_stat_activity as application `space/presence`.
//
// Keys are 64 bits of SHA-256 of the replica id. Two ids sharing a key (a
// chance of about n²/2⁶⁵ for n replica incarnations alive at once) make the
// second wait to become present, and make either look present while the
// other holds the lock: a collision can delay a takeover to the lease's
// expiry, never cause one. Advisory locks are per database, like the
// replicas' data; like LISTEN they need a session of their own, so the
// connection must reach PostgreSQL directly or through a pooler in session
// mode.

const (
	// presencePing is how often the presence connection is checked, so that
	// a replica whose connection broke becomes present again soon: while it
	// is absent, others may take its leases over.
	presencePing = 2 * time.Second
	// presencePingTimeout bounds that check.
	presencePingTimeout = 5 * time.Second
	// presenceBackoffMax caps the wait between attempts to become present
	// again; lower than the listener's, for the same reason.
	presenceBackoffMax = 2 * time.Second
)

var _ store.Presence = (*Store)(nil)

// presenceKey is the advisory lock key of replica.
func presenceKey(replica string) int64 {
	sum := sha256.Sum256([]byte("space/presence/" + replica))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// HoldPresence implements store.Presence.
func (s *Store) HoldPresence(ctx context.Context, replica string, held func(present bool, cause error)) error {
	if replica == "" {
		return fmt.Errorf("hold presence: empty replica id: %w", errdefs.ErrInvalidArgument)
	}
	return holdPresence(ctx, presenceConfig(s.cfg), presenceKey(replica), presencePing, held)
}

// holdPresence is HoldPresence with the connection configuration, the key
// and the ping period given.
func holdPresence(ctx context.Context, cfg *pgx.ConnConfig, key int64, ping time.Duration, held func(bool, error)) error {
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(reconnectBackoff(attempt, presenceBackoffMax)):
			}
		}
		c, err := lockPresence(ctx, cfg, key)
		if err == nil {
			held(true, nil)
			began := time.Now()
			err = keepPresence(ctx, c, ping)
			// Closing the session releases the lock.
			closeConn(c)
			if time.Since(began) > presenceBackoffMax {
				attempt = 0 // it worked for a while: try again at once
			}
		}
		if ctx.Err() != nil {
			held(false, nil)
			return nil
		}
		held(false, err)
	}
}

// presenceConfig is cfg for the presence connection.
func presenceConfig(cfg *pgx.ConnConfig) *pgx.ConnConfig { return sideConnConfig(cfg, "/presence") }

// lockPresence connects with cfg and takes the advisory lock key for the
// session. It does not wait for the lock: held by another session, it is
// this replica's previous one that the server has not yet seen closed (and
// which keeps the replica present meanwhile), or a key collision.
func lockPresence(ctx context.Context, cfg *pgx.ConnConfig, key int64) (*pgx.Conn, error) {
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w: %w", errdefs.ErrUnavailable, err)
	}
	var locked bool
	if err := c.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&locked); err != nil {
		closeConn(c)
		return nil, fmt.Errorf("take presence lock %d: %w", key, err)
	}
	if !locked {
		closeConn(c)
		return nil, fmt.Errorf("presence lock %d is held by another session (this replica's previous connection, not yet closed by the server, or a replica whose id hashes alike): %w",
			key, errdefs.ErrUnavailable)
	}
	return c, nil
}

// keepPresence checks c every ping until ctx is done or c fails.
func keepPresence(ctx context.Context, c *pgx.Conn, ping time.Duration) error {
	t := time.NewTicker(ping)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, presencePingTimeout)
		err := c.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("ping the presence connection: %w", err)
		}
	}
}

// presentQuery tells whether a session holds the advisory lock of a bigint
// key in this database: pg_locks shows such a key's high half as classid,
// its low half as objid, and objsubid 1 (2 is the form with two int4 keys).
const presentQuery = `SELECT EXISTS (SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND objsubid = 1
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND classid = $1::bigint::oid AND objid = $2::bigint::oid)`

// ReplicaPresent implements store.Presence.
func (s *Store) ReplicaPresent(ctx context.Context, replica string) (bool, error) {
	if replica == "" {
		return false, fmt.Errorf("replica present: empty replica id: %w", errdefs.ErrInvalidArgument)
	}
	key := uint64(presenceKey(replica))
	var present bool
	if err := s.queryRow(ctx, presentQuery, int64(key>>32), int64(key&0xffffffff)).Scan(&present); err != nil {
		return false, fmt.Errorf("is replica %s present: %w", replica, err)
	}
	return present, nil
}

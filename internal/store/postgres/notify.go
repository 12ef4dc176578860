package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// Sandbox changes are announced with PostgreSQL's LISTEN/NOTIFY: a trigger on
// the sandboxes table sends the id of every row inserted, updated or deleted
// on the channel changesChannel, and each replica listens on a connection of
// its own (not a pooled one: LISTEN belongs to a session, and a pooled
// connection is handed to whoever asks next). A trigger rather than a NOTIFY
// in each write: it covers every write path, present and future, and the
// notification is sent at commit, never for a transaction that rolled back.
//
// NOTIFY is not durable: a notification sent while a listener's connection is
// down is lost to it. The listener therefore tells its subscriber each time it
// starts listening (missed), and the subscriber looks at everything again.
//
// The trigger is PostgreSQL's own DDL, so it cannot live in the migrations the
// SQLite backend shares; Open installs it once the schema is current, under
// the migration lock, when it is missing. Its function's name carries a
// version: a later SPACE that needs another body adds another function rather
// than replacing one that older replicas still rely on.

// changesChannel is the NOTIFY channel sandbox ids are announced on. Channels
// are per database, like the migration lock.
const changesChannel = "space_sandboxes"

const (
	changesFunction = "space_sandbox_changed_v1"
	changesTrigger  = "space_sandbox_changed_v1"
)

const createChangesFunction = `CREATE FUNCTION ` + changesFunction + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('` + changesChannel + `', OLD.id);
    ELSE
        PERFORM pg_notify('` + changesChannel + `', NEW.id);
    END IF;
    RETURN NULL;
END
$$`

const createChangesTrigger = `CREATE TRIGGER ` + changesTrigger + `
    AFTER INSERT OR UPDATE OR DELETE ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION ` + changesFunction + `()`

const (
	// listenIdle is how long the listener waits for a notification before
	// it pings the server: a connection cut without a word (a partition, a
	// server host that died) would otherwise be waited on forever while
	// its notifications go elsewhere.
	listenIdle = 30 * time.Second
	// listenPingTimeout bounds that ping.
	listenPingTimeout = 5 * time.Second
	// listenBackoffMax caps the wait between attempts to listen again.
	listenBackoffMax = 10 * time.Second
)

var _ store.SandboxChanges = (*Store)(nil)

// withChangeTrigger installs the trigger that announces sandbox changes when
// it is missing, and returns s; on failure it closes s.
func withChangeTrigger(ctx context.Context, s *Store) (*Store, error) {
	if err := installChangeTrigger(ctx, s.cfg); err != nil {
		s.Close()
		return nil, fmt.Errorf("postgres: database %s on %s: install the sandbox change trigger: %w", s.cfg.Database, s.cfg.Host, err)
	}
	return s, nil
}

// installChangeTrigger creates the trigger function and the trigger where
// they are missing, in one transaction that waits for the migration lock:
// replicas starting together would otherwise both find the trigger missing
// and one would fail to create it. A database without a sandboxes table (an
// upgrade test stopping at an early schema) gets nothing.
func installChangeTrigger(ctx context.Context, cfg *pgx.ConnConfig) (err error) {
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("connect: %w", ctx.Err())
		}
		return fmt.Errorf("connect: %w: %w", errdefs.ErrUnavailable, err)
	}
	defer closeConn(c)
	tx, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreClosed(tx.Rollback(ctx)))
		}
	}()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
		return fmt.Errorf("wait for the migration lock: %w", err)
	}
	var hasTable, hasFunction, hasTrigger bool
	err = tx.QueryRow(ctx, `SELECT to_regclass('sandboxes') IS NOT NULL,
        to_regprocedure($1) IS NOT NULL,
        EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass('sandboxes') AND tgname = $2)`,
		changesFunction+"()", changesTrigger).Scan(&hasTable, &hasFunction, &hasTrigger)
	if err != nil {
		return fmt.Errorf("look for the trigger: %w", err)
	}
	if !hasTable {
		return tx.Commit(ctx)
	}
	if !hasFunction {
		if _, err := tx.Exec(ctx, createChangesFunction); err != nil {
			return fmt.Errorf("create function %s: %w", changesFunction, err)
		}
	}
	if !hasTrigger {
		if _, err := tx.Exec(ctx, createChangesTrigger); err != nil {
			return fmt.Errorf("create trigger %s: %w", changesTrigger, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// WatchSandboxChanges implements store.SandboxChanges over LISTEN on a
// connection of its own, outside the pool (so one more connection per
// replica than pool_max_conns). It reconnects after any failure, waiting
// from 100ms doubling to 10s between attempts, and calls missed each time it
// listens again.
func (s *Store) WatchSandboxChanges(ctx context.Context, changed func(id string), missed func(cause error)) error {
	return watch(ctx, listenerConfig(s.cfg), listenIdle, changed, missed)
}

// watch is WatchSandboxChanges with the connection configuration and the
// idle period before a ping given (tests shorten it).
func watch(ctx context.Context, cfg *pgx.ConnConfig, idle time.Duration, changed func(id string), missed func(cause error)) error {
	var cause error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(reconnectBackoff(attempt, listenBackoffMax)):
			}
		}
		c, err := listen(ctx, cfg)
		if err == nil {
			missed(cause)
			began := time.Now()
			err = receive(ctx, c, idle, changed)
			closeConn(c)
			if time.Since(began) > listenBackoffMax {
				attempt = 0 // it worked for a while: try again at once
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		cause = err
	}
}

// sideConnConfig is cfg for a connection of the store's own outside the
// pool (the listener, presence), its application_name given suffix so that
// an administrator can tell it in pg_stat_activity.
func sideConnConfig(cfg *pgx.ConnConfig, suffix string) *pgx.ConnConfig {
	c := cfg.Copy()
	c.RuntimeParams["application_name"] = cfg.RuntimeParams["application_name"] + suffix
	return c
}

// listenerConfig is cfg for the listening connection.
func listenerConfig(cfg *pgx.ConnConfig) *pgx.ConnConfig { return sideConnConfig(cfg, "/changes") }

// reconnectBackoff is the wait before attempt (1, 2, …) to connect a side
// connection again: exponential from 100ms, capped at limit, with jitter
// so that the replicas of a restarted server do not all come back at the
// same instant.
func reconnectBackoff(attempt int, limit time.Duration) time.Duration {
	d := limit
	if attempt < 16 {
		d = min(100*time.Millisecond<<(attempt-1), limit)
	}
	return d/2 + rand.N(d/2+1)
}

// listen connects with cfg and listens on changesChannel.
func listen(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if _, err := c.Exec(ctx, `LISTEN `+changesChannel); err != nil {
		closeConn(c)
		return nil, fmt.Errorf("listen on %s: %w", changesChannel, err)
	}
	return c, nil
}

// receive passes the sandbox ids announced on c to changed until ctx is done
// or c fails; after idle without a notification it checks c with a ping.
func receive(ctx context.Context, c *pgx.Conn, idle time.Duration, changed func(id string)) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, idle)
		n, err := c.WaitForNotification(wctx)
		timedOut := wctx.Err() == context.DeadlineExceeded
		cancel()
		switch {
		case err == nil:
			if id, ok := changedID(n); ok {
				changed(id)
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case timedOut && !c.IsClosed():
			// The wait timed out; pgx leaves the connection usable.
			pctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
			err := c.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("ping the listening connection: %w", err)
			}
		default:
			return fmt.Errorf("wait for notifications on %s: %w", changesChannel, err)
		}
	}
}

// changedID returns the sandbox id notification n announces. The payload
// comes from the database, where anyone with the right to NOTIFY could have
// sent it: only the shape of a sandbox id is accepted.
func changedID(n *pgconn.Notification) (string, bool) {
	if n == nil || n.Channel != changesChannel || !sandbox.ValidID(n.Payload) {
		return "", false
	}
	return n.Payload, true
}

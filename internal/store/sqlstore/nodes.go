package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

const nodeColumns = `id, address, cpus, memory_mib, disk_mib, runtimes, state, registered_at, last_heartbeat`

func scanNode(sc Row) (store.Node, error) {
	var n store.Node
	var runtimes string
	var registered, heartbeat int64
	err := sc.Scan(&n.ID, &n.Address, &n.Capacity.CPUs, &n.Capacity.MemoryMiB, &n.Capacity.DiskMiB,
		&runtimes, &n.State, &registered, &heartbeat)
	if err != nil {
		return store.Node{}, err
	}
	if runtimes != "" {
		n.Runtimes = strings.Split(runtimes, ",")
	}
	n.RegisteredAt, n.LastHeartbeat = fromTS(registered), fromTS(heartbeat)
	return n, nil
}

// PutNode implements store.Nodes.
func (s *Store) PutNode(ctx context.Context, n store.Node) error {
	if err := checkNode(n); err != nil {
		return err
	}
	at := now()
	if n.RegisteredAt.IsZero() {
		n.RegisteredAt = at
	}
	if n.LastHeartbeat.IsZero() {
		n.LastHeartbeat = at
	}
	return s.db.Write(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO nodes (`+nodeColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET address = excluded.address, cpus = excluded.cpus,
			memory_mib = excluded.memory_mib, disk_mib = excluded.disk_mib, runtimes = excluded.runtimes,
			state = excluded.state, last_heartbeat = excluded.last_heartbeat`,
			n.ID, n.Address, n.Capacity.CPUs, n.Capacity.MemoryMiB, n.Capacity.DiskMiB,
			strings.Join(n.Runtimes, ","), string(n.State), ts(n.RegisteredAt), ts(n.LastHeartbeat))
		if err != nil {
			return fmt.Errorf("node %s: put: %w", n.ID, err)
		}
		return nil
	})
}

// GetNode implements store.Nodes.
func (s *Store) GetNode(ctx context.Context, id string) (store.Node, error) {
	n, err := scanNode(s.db.QueryRow(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Node{}, fmt.Errorf("node %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.Node{}, fmt.Errorf("node %s: get: %w", id, err)
	}
	return n, nil
}

// ListNodes implements store.Nodes.
// nodeUsageQuery sums, per node, the sandboxes that hold resources.
var nodeUsageQuery = `SELECT node_id, COUNT(*), COALESCE(SUM(memory_mib), 0), COALESCE(SUM(cpus), 0) FROM sandboxes
	WHERE node_id <> '' AND state NOT IN (` + releasedList() + `) GROUP BY node_id`

// NodeUsage implements store.Nodes.
func (s *Store) NodeUsage(ctx context.Context) (map[string]store.Usage, error) {
	type nodeUsage struct {
		node string
		u    store.Usage
	}
	rows, err := queryAll(ctx, s.db, func(r Row) (nodeUsage, error) {
		var nu nodeUsage
		err := r.Scan(&nu.node, &nu.u.Sandboxes, &nu.u.MemoryMiB, &nu.u.CPUs)
		return nu, err
	}, nodeUsageQuery)
	if err != nil {
		return nil, fmt.Errorf("node usage: %w", err)
	}
	out := make(map[string]store.Usage, len(rows))
	for _, nu := range rows {
		out[nu.node] = nu.u
	}
	return out, nil
}

func (s *Store) ListNodes(ctx context.Context) ([]store.Node, error) {
	out, err := queryAll(ctx, s.db, scanNode, `SELECT `+nodeColumns+` FROM nodes ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return out, nil
}

// Heartbeat implements store.Nodes.
func (s *Store) Heartbeat(ctx context.Context, id string, at time.Time) error {
	return s.db.Write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `UPDATE nodes SET last_heartbeat = ? WHERE id = ?`, ts(at), id)
		if err != nil {
			return fmt.Errorf("node %s: heartbeat: %w", id, err)
		}
		if n == 0 {
			return fmt.Errorf("node %s: not registered: %w", id, errdefs.ErrNotFound)
		}
		return nil
	})
}

// DeleteNode implements store.Nodes.
func (s *Store) DeleteNode(ctx context.Context, id string) error {
	return s.writeOne(ctx, "node "+id, "delete", `DELETE FROM nodes WHERE id = ?`, id)
}

// RecordHeartbeat implements store.Nodes. The read of the previous state and
// the upsert share one write transaction, serial with every other write
// (DB.Write), so a concurrent drain (PutNode) lands wholly before or after it;
// and the upsert itself keeps a draining state, so it never undoes one.
func (s *Store) RecordHeartbeat(ctx context.Context, n store.Node) (store.NodeState, error) {
	if err := checkNode(n); err != nil {
		return "", err
	}
	at := now()
	if n.RegisteredAt.IsZero() {
		n.RegisteredAt = at
	}
	if n.LastHeartbeat.IsZero() {
		n.LastHeartbeat = at
	}
	var prev store.NodeState
	err := s.db.Write(ctx, func(tx Tx) error {
		prev = ""
		err := tx.QueryRow(ctx, `SELECT state FROM nodes WHERE id = ?`, n.ID).Scan(&prev)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("node %s: heartbeat: %w", n.ID, err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO nodes (`+nodeColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET address = excluded.address, cpus = excluded.cpus,
			memory_mib = excluded.memory_mib, disk_mib = excluded.disk_mib, runtimes = excluded.runtimes,
			state = CASE WHEN nodes.state = ? THEN nodes.state ELSE excluded.state END,
			last_heartbeat = excluded.last_heartbeat`,
			n.ID, n.Address, n.Capacity.CPUs, n.Capacity.MemoryMiB, n.Capacity.DiskMiB,
			strings.Join(n.Runtimes, ","), string(store.NodeReady), ts(n.RegisteredAt), ts(n.LastHeartbeat),
			string(store.NodeDraining))
		if err != nil {
			return fmt.Errorf("node %s: heartbeat: %w", n.ID, err)
		}
		return nil
	})
	return prev, err
}

// checkNode validates what PutNode and RecordHeartbeat store.
func checkNode(n store.Node) error {
	if n.ID == "" {
		return fmt.Errorf("put node: empty id: %w", errdefs.ErrInvalidArgument)
	}
	for _, r := range n.Runtimes {
		if r == "" || strings.Contains(r, ",") {
			return fmt.Errorf("node %s: runtime name %q: must be non-empty without ',': %w", n.ID, r, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

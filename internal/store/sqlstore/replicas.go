package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

var _ store.ReplicaAddresses = (*Store)(nil)

// PutReplicaAddresses implements store.ReplicaAddresses.
func (s *Store) PutReplicaAddresses(ctx context.Context, replica string, addrs []string, expires, now time.Time) error {
	if replica == "" || len(addrs) > store.MaxReplicaAddresses {
		return fmt.Errorf("replica addresses: want a replica and at most %d addresses: %w", store.MaxReplicaAddresses, errdefs.ErrInvalidArgument)
	}
	if addrs == nil {
		addrs = []string{}
	}
	b, err := json.Marshal(addrs)
	if err != nil {
		return fmt.Errorf("replica %s: addresses: %w", replica, err)
	}
	return s.db.Write(ctx, func(tx Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM replica_addresses WHERE expires_at < ?`, ts(now)); err != nil {
			return fmt.Errorf("replica addresses: expire: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO replica_addresses (replica, addresses, expires_at) VALUES (?, ?, ?)
			ON CONFLICT (replica) DO UPDATE SET addresses = excluded.addresses, expires_at = excluded.expires_at`,
			replica, string(b), ts(expires))
		if err != nil {
			return fmt.Errorf("replica %s: put addresses: %w", replica, err)
		}
		return nil
	})
}

// ListReplicaAddresses implements store.ReplicaAddresses.
func (s *Store) ListReplicaAddresses(ctx context.Context, now time.Time) ([]string, error) {
	rows, err := queryAll(ctx, s.db, func(r Row) (string, error) {
		var v string
		err := r.Scan(&v)
		return v, err
	}, `SELECT addresses FROM replica_addresses WHERE expires_at >= ? ORDER BY replica`, ts(now))
	if err != nil {
		return nil, fmt.Errorf("list replica addresses: %w", err)
	}
	var out []string
	for _, v := range rows {
		var as []string
		if json.Unmarshal([]byte(v), &as) == nil {
			out = append(out, as...)
		}
	}
	return out, nil
}

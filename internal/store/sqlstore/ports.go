package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

const portColumns = `sandbox_id, port, protocol, public, token_hash, host_mask, created_at`

func scanServicePort(sc Row) (store.ServicePort, error) {
	var p store.ServicePort
	var created int64
	err := sc.Scan(&p.Sandbox, &p.Port, &p.Protocol, &p.Public, &p.TokenHash, &p.HostMask, &created)
	p.CreatedAt = fromTS(created)
	return p, err
}

// PutServicePort implements store.ServicePorts.
func (s *Store) PutServicePort(ctx context.Context, p store.ServicePort) error {
	if p.Sandbox == "" || p.Port < 0 || p.Port > 65535 || p.Protocol == "" {
		return fmt.Errorf("put port %d of sandbox %q: empty sandbox or protocol, or port out of range: %w", p.Port, p.Sandbox, errdefs.ErrInvalidArgument)
	}
	return s.db.Write(ctx, func(tx Tx) error {
		ok, err := exists(ctx, tx, `SELECT 1 FROM sandboxes WHERE id = ?`, p.Sandbox)
		if err != nil {
			return fmt.Errorf("sandbox %s: put port %d: %w", p.Sandbox, p.Port, err)
		}
		if !ok {
			return fmt.Errorf("sandbox %s: %w", p.Sandbox, errdefs.ErrNotFound)
		}
		_, err = tx.Exec(ctx, `INSERT INTO sandbox_ports (`+portColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (sandbox_id, port) DO UPDATE SET protocol = excluded.protocol, public = excluded.public,
			token_hash = excluded.token_hash, host_mask = excluded.host_mask, created_at = excluded.created_at`,
			p.Sandbox, p.Port, p.Protocol, p.Public, p.TokenHash, p.HostMask, ts(p.CreatedAt))
		if s.d.IsForeignKey(err) { // the sandbox went in the meantime
			return fmt.Errorf("sandbox %s: %w", p.Sandbox, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sandbox %s: put port %d: %w", p.Sandbox, p.Port, err)
		}
		return nil
	})
}

// GetServicePort implements store.ServicePorts.
func (s *Store) GetServicePort(ctx context.Context, sandbox string, port int) (store.ServicePort, error) {
	p, err := scanServicePort(s.db.QueryRow(ctx,
		`SELECT `+portColumns+` FROM sandbox_ports WHERE sandbox_id = ? AND port = ?`, sandbox, port))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.ServicePort{}, fmt.Errorf("sandbox %s: port %d: %w", sandbox, port, errdefs.ErrNotFound)
	case err != nil:
		return store.ServicePort{}, fmt.Errorf("sandbox %s: get port %d: %w", sandbox, port, err)
	}
	return p, nil
}

// ListServicePorts implements store.ServicePorts.
func (s *Store) ListServicePorts(ctx context.Context, sandbox string) ([]store.ServicePort, error) {
	out, err := queryAll(ctx, s.db, scanServicePort, `SELECT `+portColumns+` FROM sandbox_ports WHERE sandbox_id = ? ORDER BY port`, sandbox)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: list ports: %w", sandbox, err)
	}
	return out, nil
}

// DeleteServicePort implements store.ServicePorts.
func (s *Store) DeleteServicePort(ctx context.Context, sandbox string, port int) error {
	return s.db.Write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `DELETE FROM sandbox_ports WHERE sandbox_id = ? AND port = ?`, sandbox, port)
		if err != nil {
			return fmt.Errorf("sandbox %s: delete port %d: %w", sandbox, port, err)
		}
		if n == 0 {
			return fmt.Errorf("sandbox %s: port %d: %w", sandbox, port, errdefs.ErrNotFound)
		}
		return nil
	})
}

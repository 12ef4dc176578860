package sqlstore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

func scanIdempotency(sc Row) (store.IdempotencyRecord, error) {
	var rec store.IdempotencyRecord
	var body string
	var created int64
	if err := sc.Scan(&rec.Tenant, &rec.Key, &rec.Fingerprint, &rec.Status, &body, &created); err != nil {
		return store.IdempotencyRecord{}, err
	}
	b, err := base64.StdEncoding.DecodeString(body)
	if err != nil {
		return store.IdempotencyRecord{}, fmt.Errorf("decode body: %w", err)
	}
	rec.Body, rec.CreatedAt = b, fromTS(created)
	return rec, nil
}

const idempotencyColumns = `tenant_id, idem_key, fingerprint, status, body, created_at`

// PutIdempotency implements store.Idempotency.
func (s *Store) PutIdempotency(ctx context.Context, rec store.IdempotencyRecord) (store.IdempotencyRecord, error) {
	if rec.Tenant == "" || rec.Key == "" {
		return store.IdempotencyRecord{}, fmt.Errorf("idempotency record: empty tenant or key: %w", errdefs.ErrInvalidArgument)
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = now()
	}
	out := rec
	err := s.db.Write(ctx, func(tx Tx) error {
		prev, err := scanIdempotency(tx.QueryRow(ctx,
			`SELECT `+idempotencyColumns+` FROM idempotency WHERE tenant_id = ? AND idem_key = ?`, rec.Tenant, rec.Key))
		switch {
		case err == nil && prev.Fingerprint == rec.Fingerprint:
			out = prev
			return nil
		case err == nil:
			return fmt.Errorf("idempotency key %q was used for a different request: %w", rec.Key, errdefs.ErrConflict)
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("idempotency key %q: %w", rec.Key, err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO idempotency (`+idempotencyColumns+`) VALUES (?, ?, ?, ?, ?, ?)`,
			rec.Tenant, rec.Key, rec.Fingerprint, rec.Status, base64.StdEncoding.EncodeToString(rec.Body), ts(rec.CreatedAt))
		if s.d.IsForeignKey(err) {
			return fmt.Errorf("idempotency key %q: tenant %s: %w", rec.Key, rec.Tenant, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("idempotency key %q: store: %w", rec.Key, err)
		}
		return nil
	})
	if err != nil {
		return store.IdempotencyRecord{}, err
	}
	return out, nil
}

// GetIdempotency implements store.Idempotency.
func (s *Store) GetIdempotency(ctx context.Context, tenant, key string) (store.IdempotencyRecord, error) {
	rec, err := scanIdempotency(s.db.QueryRow(ctx,
		`SELECT `+idempotencyColumns+` FROM idempotency WHERE tenant_id = ? AND idem_key = ?`, tenant, key))
	if errors.Is(err, sql.ErrNoRows) {
		return store.IdempotencyRecord{}, fmt.Errorf("idempotency key %q: %w", key, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.IdempotencyRecord{}, fmt.Errorf("idempotency key %q: get: %w", key, err)
	}
	return rec, nil
}

// DeleteIdempotencyBefore implements store.Idempotency.
func (s *Store) DeleteIdempotencyBefore(ctx context.Context, t time.Time) (int, error) {
	var n int64
	err := s.db.Write(ctx, func(tx Tx) error {
		deleted, err := tx.Exec(ctx, `DELETE FROM idempotency WHERE created_at < ?`, ts(t))
		if err != nil {
			return fmt.Errorf("expire idempotency records: %w", err)
		}
		n = deleted
		return nil
	})
	return int(n), err
}

// AppendEvent implements store.Events. The sequence number is computed in the
// writing transaction (portable; no AUTOINCREMENT).
func (s *Store) AppendEvent(ctx context.Context, e store.Event) (store.Event, error) {
	if err := checkEvent(&e); err != nil {
		return store.Event{}, err
	}
	if err := s.db.Write(ctx, func(tx Tx) error { return appendEvent(ctx, tx, &e) }); err != nil {
		return store.Event{}, err
	}
	return e, nil
}

// checkEvent refuses an event without its sandbox or type and dates one
// without a time.
func checkEvent(e *store.Event) error {
	if e.SandboxID == "" || e.Type == "" {
		return fmt.Errorf("append event: empty sandbox id or type: %w", errdefs.ErrInvalidArgument)
	}
	if e.Time.IsZero() {
		e.Time = now()
	}
	return nil
}

// appendEvent inserts e in tx as the next of its sandbox's events and sets
// its Seq.
func appendEvent(ctx context.Context, tx Tx, e *store.Event) error {
	var last *int64
	if err := tx.QueryRow(ctx, `SELECT MAX(seq) FROM sandbox_events WHERE sandbox_id = ?`, e.SandboxID).Scan(&last); err != nil {
		return fmt.Errorf("sandbox %s: append event: %w", e.SandboxID, err)
	}
	e.Seq = 1
	if last != nil {
		e.Seq = *last + 1
	}
	_, err := tx.Exec(ctx, `INSERT INTO sandbox_events (sandbox_id, seq, at, type, message, progress) VALUES (?, ?, ?, ?, ?, ?)`,
		e.SandboxID, e.Seq, ts(e.Time), e.Type, e.Message, e.Progress)
	if err != nil {
		return fmt.Errorf("sandbox %s: append event: %w", e.SandboxID, err)
	}
	return nil
}

// appendEvents checks events and inserts them in tx in order.
func appendEvents(ctx context.Context, tx Tx, events []store.Event) error {
	for i := range events {
		if err := appendEvent(ctx, tx, &events[i]); err != nil {
			return err
		}
	}
	return nil
}

func scanEvent(sc Row) (store.Event, error) {
	var e store.Event
	var at int64
	err := sc.Scan(&e.Seq, &e.SandboxID, &at, &e.Type, &e.Message, &e.Progress)
	e.Time = fromTS(at)
	return e, err
}

// ListEvents implements store.Events.
func (s *Store) ListEvents(ctx context.Context, sandboxID string) ([]store.Event, error) {
	out, err := queryAll(ctx, s.db, scanEvent, `SELECT seq, sandbox_id, at, type, message, progress FROM sandbox_events
		WHERE sandbox_id = ? ORDER BY seq`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: list events: %w", sandboxID, err)
	}
	return out, nil
}

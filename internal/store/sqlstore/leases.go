package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// leaseRow is a lease's stored state.
type leaseRow struct {
	holder  string
	token   int64
	expires time.Time
}

// getLease reads the lease name in tx; found is false when no row exists.
func getLease(ctx context.Context, tx Tx, name string) (r leaseRow, found bool, err error) {
	var expires int64
	err = tx.QueryRow(ctx, `SELECT holder, token, expires_at FROM leases WHERE name = ?`, name).Scan(&r.holder, &r.token, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return leaseRow{}, false, nil
	}
	if err != nil {
		return leaseRow{}, false, fmt.Errorf("lease %s: read: %w", name, err)
	}
	r.expires = fromTS(expires)
	return r, true, nil
}

func checkLeaseArgs(name, holder string, ttl time.Duration) error {
	if name == "" || holder == "" || ttl <= 0 {
		return fmt.Errorf("lease %q for %q: want a name, a holder and a positive ttl (got %v): %w", name, holder, ttl, errdefs.ErrInvalidArgument)
	}
	return nil
}

// AcquireLease implements store.Leases.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	if err := checkLeaseArgs(name, holder, ttl); err != nil {
		return store.Lease{}, err
	}
	var l store.Lease
	err := s.db.Write(ctx, func(tx Tx) error {
		at, err := s.d.LeaseNow(ctx, tx)
		if err != nil {
			return err
		}
		cur, found, err := getLease(ctx, tx, name)
		if err != nil {
			return err
		}
		l = store.Lease{Name: name, Holder: holder, Token: 1, Expires: at.Add(ttl)}
		switch {
		case !found:
			_, err = tx.Exec(ctx, `INSERT INTO leases (name, holder, token, expires_at, acquired_at) VALUES (?, ?, ?, ?, ?)`,
				name, holder, l.Token, ts(l.Expires), ts(at))
		case cur.holder == holder && cur.expires.After(at):
			// Already ours: renew, keeping the token.
			l.Token = cur.token
			_, err = tx.Exec(ctx, `UPDATE leases SET expires_at = ? WHERE name = ?`, ts(l.Expires), name)
		case cur.holder != "" && cur.expires.After(at):
			return &store.LeaseHeldError{Name: name, Holder: cur.holder, Token: cur.token, Expires: cur.expires}
		default:
			l.Token = cur.token + 1
			_, err = tx.Exec(ctx, `UPDATE leases SET holder = ?, token = ?, expires_at = ?, acquired_at = ? WHERE name = ?`,
				holder, l.Token, ts(l.Expires), ts(at), name)
		}
		if s.d.IsUnique(err) { // inserted by a concurrent acquirer
			return fmt.Errorf("lease %s: acquired concurrently by another holder: %w", name, errdefs.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("lease %s: acquire: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return store.Lease{}, err
	}
	return l, nil
}

// currentLease reads l's row and checks that l is still its current lease.
func currentLease(ctx context.Context, tx Tx, l store.Lease) (leaseRow, error) {
	cur, found, err := getLease(ctx, tx, l.Name)
	switch {
	case err != nil:
		return leaseRow{}, err
	case !found:
		return leaseRow{}, fmt.Errorf("lease %s: %w", l.Name, errdefs.ErrNotFound)
	case cur.token != l.Token:
		return leaseRow{}, fmt.Errorf("lease %s: token %d of %s was superseded by token %d of %s: %w",
			l.Name, l.Token, l.Holder, cur.token, cur.holder, errdefs.ErrConflict)
	}
	return cur, nil
}

// RenewLease implements store.Leases.
func (s *Store) RenewLease(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if err := checkLeaseArgs(l.Name, l.Holder, ttl); err != nil {
		return store.Lease{}, err
	}
	err := s.db.Write(ctx, func(tx Tx) error {
		at, err := s.d.LeaseNow(ctx, tx)
		if err != nil {
			return err
		}
		cur, err := currentLease(ctx, tx, l)
		if err != nil {
			return err
		}
		if cur.holder != l.Holder {
			return fmt.Errorf("lease %s: token %d was released: %w", l.Name, l.Token, errdefs.ErrConflict)
		}
		l.Expires = at.Add(ttl)
		if _, err := tx.Exec(ctx, `UPDATE leases SET expires_at = ? WHERE name = ? AND token = ?`, ts(l.Expires), l.Name, l.Token); err != nil {
			return fmt.Errorf("lease %s: renew: %w", l.Name, err)
		}
		return nil
	})
	if err != nil {
		return store.Lease{}, err
	}
	return l, nil
}

// ReleaseLease implements store.Leases. The row stays, holder ” and expiry
// 0, so that the name's next token is still greater.
func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	if l.Name == "" {
		return fmt.Errorf("release lease: empty name: %w", errdefs.ErrInvalidArgument)
	}
	return s.db.Write(ctx, func(tx Tx) error {
		cur, err := currentLease(ctx, tx, l)
		if err != nil || cur.holder == "" {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE leases SET holder = '', expires_at = 0 WHERE name = ? AND token = ?`, l.Name, l.Token); err != nil {
			return fmt.Errorf("lease %s: release: %w", l.Name, err)
		}
		return nil
	})
}

// TakeOverLease implements store.Leases.
func (s *Store) TakeOverLease(ctx context.Context, name, from, to string, ttl time.Duration) (store.Lease, error) {
	if err := checkLeaseArgs(name, to, ttl); err != nil {
		return store.Lease{}, err
	}
	if from == "" || from == to {
		return store.Lease{}, fmt.Errorf("lease %s: take over from %q to %q: want another, non-empty former holder: %w", name, from, to, errdefs.ErrInvalidArgument)
	}
	var l store.Lease
	err := s.db.Write(ctx, func(tx Tx) error {
		at, err := s.d.LeaseNow(ctx, tx)
		if err != nil {
			return err
		}
		cur, found, err := getLease(ctx, tx, name)
		switch {
		case err != nil:
			return err
		case !found:
			return fmt.Errorf("lease %s: take over from %s: %w", name, from, errdefs.ErrNotFound)
		case cur.holder != from:
			// Released, or taken by another since the caller looked.
			return fmt.Errorf("lease %s: take over from %s: held by %q (token %d) now: %w", name, from, cur.holder, cur.token, errdefs.ErrConflict)
		}
		l = store.Lease{Name: name, Holder: to, Token: cur.token + 1, Expires: at.Add(ttl)}
		// The token in the condition makes the write lose to any other
		// that changed the row since it was read (SQLite runs one writer at
		// a time anyway; PostgreSQL's SERIALIZABLE would abort one of two).
		n, err := tx.Exec(ctx, `UPDATE leases SET holder = ?, token = ?, expires_at = ?, acquired_at = ? WHERE name = ? AND holder = ? AND token = ?`,
			to, l.Token, ts(l.Expires), ts(at), name, from, cur.token)
		if err != nil {
			return fmt.Errorf("lease %s: take over from %s: %w", name, from, err)
		}
		if n != 1 {
			return fmt.Errorf("lease %s: take over from %s: changed concurrently: %w", name, from, errdefs.ErrConflict)
		}
		return nil
	})
	if err != nil {
		return store.Lease{}, err
	}
	return l, nil
}

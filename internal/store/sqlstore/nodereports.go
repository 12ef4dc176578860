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

func checkNodeReport(r store.NodeReport) error {
	switch {
	case r.Node == "" || r.ReportedAt.IsZero():
		return fmt.Errorf("node report: want a node and a time: %w", errdefs.ErrInvalidArgument)
	case len(r.SealedToken)+len(r.Executions) > store.MaxNodeReportBytes:
		return fmt.Errorf("node %s: report of %d bytes exceeds %d: %w", r.Node, len(r.SealedToken)+len(r.Executions), store.MaxNodeReportBytes, errdefs.ErrInvalidArgument)
	}
	return nil
}

// PutNodeReport implements store.NodeReports.
func (s *Store) PutNodeReport(ctx context.Context, r store.NodeReport) error {
	if err := checkNodeReport(r); err != nil {
		return err
	}
	return s.db.Write(ctx, func(tx Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM nodes WHERE id = ?`, r.Node).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("node %s: report: %w (it must register first)", r.Node, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("node %s: report: %w", r.Node, err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO node_reports (node_id, sealed_token, executions, reported_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (node_id) DO UPDATE SET sealed_token = excluded.sealed_token, executions = excluded.executions,
			reported_at = excluded.reported_at WHERE node_reports.reported_at <= excluded.reported_at`,
			r.Node, r.SealedToken, r.Executions, ts(r.ReportedAt))
		if err != nil {
			return fmt.Errorf("node %s: report: %w", r.Node, err)
		}
		return nil
	})
}

const nodeReportColumns = `node_id, sealed_token, executions, reported_at`

func scanNodeReport(sc Row) (store.NodeReport, error) {
	var r store.NodeReport
	var at int64
	if err := sc.Scan(&r.Node, &r.SealedToken, &r.Executions, &at); err != nil {
		return store.NodeReport{}, err
	}
	r.ReportedAt = fromTS(at)
	return r, nil
}

// GetNodeReport implements store.NodeReports.
func (s *Store) GetNodeReport(ctx context.Context, node string) (store.NodeReport, error) {
	r, err := scanNodeReport(s.db.QueryRow(ctx, `SELECT `+nodeReportColumns+` FROM node_reports WHERE node_id = ?`, node))
	if errors.Is(err, sql.ErrNoRows) {
		return store.NodeReport{}, fmt.Errorf("node %s: no report: %w", node, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.NodeReport{}, fmt.Errorf("node %s: get report: %w", node, err)
	}
	return r, nil
}

// ListNodeReports implements store.NodeReports.
func (s *Store) ListNodeReports(ctx context.Context) ([]store.NodeReport, error) {
	out, err := queryAll(ctx, s.db, scanNodeReport, `SELECT `+nodeReportColumns+` FROM node_reports ORDER BY node_id`)
	if err != nil {
		return nil, fmt.Errorf("list node reports: %w", err)
	}
	return out, nil
}

// MarkNodeDown implements store.NodeReports.
func (s *Store) MarkNodeDown(ctx context.Context, id string, silentSince time.Time) (bool, error) {
	var marked bool
	err := s.db.Write(ctx, func(tx Tx) error {
		marked = false // a retried transaction starts over
		n, err := tx.Exec(ctx, `UPDATE nodes SET state = ? WHERE id = ? AND state <> ? AND last_heartbeat < ?`,
			string(store.NodeDown), id, string(store.NodeDown), ts(silentSince))
		if err != nil {
			return fmt.Errorf("node %s: mark down: %w", id, err)
		}
		if n == 0 {
			var one int
			err := tx.QueryRow(ctx, `SELECT 1 FROM nodes WHERE id = ?`, id).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("node %s: %w", id, errdefs.ErrNotFound)
			}
			return err
		}
		marked = true
		return nil
	})
	return marked, err
}

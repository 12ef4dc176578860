package sqlstore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

const sandboxColumns = `id, tenant_id, name, template, runtime, cpus, memory_mib, disk_mib, env, metadata,
	created_at, expires_at, desired_state, state, reason, generation, node_id, exec_id, activation_id,
	start_from, idle_timeout, idle_action, egress, project, ca_cert, ca_key, version, updated_at`

// sandboxRow is a sandbox in column form.
type sandboxRow struct {
	env, metadata string
	created       int64
	expires       *int64
	generation    int64
	idle          int64
	egress        string
	caKey         string
	updated       int64
}

// encodeEgress returns a policy's column form: its JSON, or the empty string for none.
func encodeEgress(p *egress.Policy) string {
	if p == nil {
		return ""
	}
	return string(sandbox.EgressJSON(p))
}

// decodeEgress parses the egress column; the empty string is a sandbox without a policy
// of its own (recorded before policies existed).
func decodeEgress(s string) (*egress.Policy, error) {
	if s == "" {
		return nil, nil
	}
	return egress.ParsePolicy([]byte(s))
}

func encodeMap(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// encodeMaps returns the column forms of sb's environment and metadata.
func encodeMaps(sb *sandbox.Sandbox) (env, md string, err error) {
	if env, err = encodeMap(sb.Env); err != nil {
		return "", "", fmt.Errorf("sandbox %s: encode env: %w", sb.ID, err)
	}
	if md, err = encodeMap(sb.Metadata); err != nil {
		return "", "", fmt.Errorf("sandbox %s: encode metadata: %w", sb.ID, err)
	}
	return env, md, nil
}

func decodeMap(s string) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

func scanSandbox(sc Row) (*sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	var r sandboxRow
	err := sc.Scan(&sb.ID, &sb.Tenant, &sb.Name, &sb.Template, &sb.Runtime, &sb.CPUs, &sb.MemoryMiB, &sb.DiskMiB,
		&r.env, &r.metadata, &r.created, &r.expires, &sb.Desired, &sb.State, &sb.Reason, &r.generation,
		&sb.Node, &sb.ExecID, &sb.ActivationID, &sb.StartFrom, &r.idle, &sb.IdleAction, &r.egress, &sb.Project, &sb.CACert, &r.caKey, &sb.Version, &r.updated)
	if err != nil {
		return nil, err
	}
	if sb.Env, err = decodeMap(r.env); err != nil {
		return nil, fmt.Errorf("sandbox %s: decode env: %w", sb.ID, err)
	}
	if sb.Metadata, err = decodeMap(r.metadata); err != nil {
		return nil, fmt.Errorf("sandbox %s: decode metadata: %w", sb.ID, err)
	}
	if sb.Egress, err = decodeEgress(r.egress); err != nil {
		return nil, fmt.Errorf("sandbox %s: decode egress policy: %w", sb.ID, err)
	}
	if sb.CAKey, err = base64.StdEncoding.DecodeString(r.caKey); err != nil {
		return nil, fmt.Errorf("sandbox %s: decode sealed CA key: %w", sb.ID, err)
	}
	if len(sb.CAKey) == 0 {
		sb.CAKey = nil
	}
	sb.CreatedAt, sb.ExpiresAt, sb.UpdatedAt = fromTS(r.created), fromNullTS(r.expires), fromTS(r.updated)
	sb.Generation = uint64(r.generation)
	sb.IdleTimeout = time.Duration(r.idle)
	return &sb, nil
}

// CreateSandbox implements store.Sandboxes.
func (s *Store) CreateSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	return s.createSandbox(ctx, sb, false, nil)
}

// CreateSandboxWithinQuota implements store.Sandboxes.
func (s *Store) CreateSandboxWithinQuota(ctx context.Context, sb *sandbox.Sandbox) error {
	return s.createSandbox(ctx, sb, true, nil)
}

// CreateSandboxWithinQuotaAndEvents implements store.SandboxEvents.
func (s *Store) CreateSandboxWithinQuotaAndEvents(ctx context.Context, sb *sandbox.Sandbox, events []store.Event) error {
	return s.createSandbox(ctx, sb, true, events)
}

// createSandbox inserts sb, then events (each naming sb), in one
// transaction; if withinQuota (a create or fork by a caller, who read the
// template earlier) it first checks that sb's template still exists and
// admits sb under its tenant's quota.
func (s *Store) createSandbox(ctx context.Context, sb *sandbox.Sandbox, withinQuota bool, events []store.Event) error {
	if sb.ID == "" || sb.Tenant == "" {
		return fmt.Errorf("create sandbox: empty id or tenant: %w", errdefs.ErrInvalidArgument)
	}
	if err := checkEvents(sb.ID, events); err != nil {
		return err
	}
	env, md, err := encodeMaps(sb)
	if err != nil {
		return err
	}
	at := now()
	created := sb.CreatedAt
	if created.IsZero() {
		created = at
	}
	err = s.db.Write(ctx, func(tx Tx) error {
		ok, err := exists(ctx, tx, `SELECT 1 FROM tenants WHERE id = ?`, sb.Tenant)
		if err != nil {
			return fmt.Errorf("sandbox %s: create: %w", sb.ID, err)
		}
		if !ok {
			return fmt.Errorf("sandbox %s: tenant %s: %w", sb.ID, sb.Tenant, errdefs.ErrNotFound)
		}
		if withinQuota {
			if err := templateStillExists(ctx, tx, sb); err != nil {
				return err
			}
			if store.HoldsResources(sb.State) {
				if err := admit(ctx, tx, sb); err != nil {
					return err
				}
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO sandboxes (`+sandboxColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			sb.ID, sb.Tenant, sb.Name, sb.Template, sb.Runtime, sb.CPUs, sb.MemoryMiB, sb.DiskMiB, env, md,
			ts(created), nullTS(sb.ExpiresAt), string(sb.Desired), string(sb.State), sb.Reason, int64(sb.Generation),
			sb.Node, sb.ExecID, sb.ActivationID, sb.StartFrom, int64(sb.IdleTimeout), sb.IdleAction, encodeEgress(sb.Egress),
			sb.Project, sb.CACert, base64.StdEncoding.EncodeToString(sb.CAKey), 1, ts(at))
		if s.d.IsUnique(err) {
			return fmt.Errorf("sandbox %s: already exists: %w", sb.ID, errdefs.ErrConflict)
		}
		if s.d.IsForeignKey(err) { // the tenant went in the meantime
			return fmt.Errorf("sandbox %s: tenant %s: %w", sb.ID, sb.Tenant, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sandbox %s: create: %w", sb.ID, err)
		}
		return appendEvents(ctx, tx, events)
	})
	if err != nil {
		return err
	}
	sb.CreatedAt, sb.Version, sb.UpdatedAt = created, 1, at
	return nil
}

// templateStillExists returns ErrNotFound unless sb's template has a row.
// The caller read the template before placing sb, and DeleteTemplate
// deletes a template no sandbox uses: a delete between that read and this
// insert would otherwise leave sb on a template that is gone. The read here
// shares the insert's transaction, so the two cannot interleave: SQLite runs
// one write at a time, and PostgreSQL at SERIALIZABLE aborts one of a create
// and a delete that each read what the other writes, and the retry of the
// create sees the template gone.
func templateStillExists(ctx context.Context, tx Tx, sb *sandbox.Sandbox) error {
	ok, err := exists(ctx, tx, `SELECT 1 FROM templates WHERE name = ?`, sb.Template)
	if err != nil {
		return fmt.Errorf("sandbox %s: create: read template %s: %w", sb.ID, sb.Template, err)
	}
	if !ok {
		return fmt.Errorf("%w: template %q was deleted while the sandbox was being created; create it again", errdefs.ErrNotFound, sb.Template)
	}
	return nil
}

// GetSandbox implements store.Sandboxes.
func (s *Store) GetSandbox(ctx context.Context, tenant, id string) (*sandbox.Sandbox, error) {
	sb, err := scanSandbox(s.db.QueryRow(ctx,
		`SELECT `+sandboxColumns+` FROM sandboxes WHERE id = ? AND tenant_id = ?`, id, tenant))
	return sb, sandboxErr(id, "get", err)
}

// GetSandboxByID implements store.Sandboxes.
func (s *Store) GetSandboxByID(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	sb, err := scanSandbox(s.db.QueryRow(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE id = ?`, id))
	return sb, sandboxErr(id, "get", err)
}

func sandboxErr(id, op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	default:
		return fmt.Errorf("sandbox %s: %s: %w", id, op, err)
	}
}

// ListSandboxes implements store.Sandboxes.
func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*sandbox.Sandbox, error) {
	var where []string
	var args []any
	if f.Tenant != "" {
		where, args = append(where, "tenant_id = ?"), append(args, f.Tenant)
	}
	if f.Node != "" {
		where, args = append(where, "node_id = ?"), append(args, f.Node)
	}
	q := `SELECT ` + sandboxColumns + ` FROM sandboxes`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	out, err := queryAll(ctx, s.db, scanSandbox, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// UpdateSandbox implements store.Sandboxes.
func (s *Store) UpdateSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	return s.updateSandbox(ctx, sb, false, nil)
}

// UpdateSandboxWithinQuota implements store.Sandboxes.
func (s *Store) UpdateSandboxWithinQuota(ctx context.Context, sb *sandbox.Sandbox) error {
	return s.updateSandbox(ctx, sb, true, nil)
}

// UpdateSandboxAndEvents implements store.SandboxEvents.
func (s *Store) UpdateSandboxAndEvents(ctx context.Context, sb *sandbox.Sandbox, events []store.Event) error {
	return s.updateSandbox(ctx, sb, false, events)
}

// checkEvents checks events to write with sandbox id's row.
func checkEvents(id string, events []store.Event) error {
	for i := range events {
		if events[i].SandboxID != id {
			return fmt.Errorf("sandbox %s: event for sandbox %q: %w", id, events[i].SandboxID, errdefs.ErrInvalidArgument)
		}
		if err := checkEvent(&events[i]); err != nil {
			return err
		}
	}
	return nil
}

// updateSandbox writes sb, first admitting it under its tenant's quota if
// withinQuota and the update makes it hold resources, then events (each
// naming sb), in one transaction.
func (s *Store) updateSandbox(ctx context.Context, sb *sandbox.Sandbox, withinQuota bool, events []store.Event) error {
	env, md, err := encodeMaps(sb)
	if err != nil {
		return err
	}
	if err := checkEvents(sb.ID, events); err != nil {
		return err
	}
	at := now()
	err = s.db.Write(ctx, func(tx Tx) error {
		if withinQuota {
			if err := admitUpdate(ctx, tx, sb); err != nil {
				return err
			}
		}
		n, err := tx.Exec(ctx, `UPDATE sandboxes SET name = ?, template = ?, runtime = ?, cpus = ?,
			memory_mib = ?, disk_mib = ?, env = ?, metadata = ?, expires_at = ?, desired_state = ?, state = ?,
			reason = ?, generation = ?, node_id = ?, exec_id = ?, activation_id = ?, start_from = ?,
			idle_timeout = ?, idle_action = ?, egress = ?, project = ?, ca_cert = ?, ca_key = ?,
			version = version + 1, updated_at = ? WHERE id = ? AND version = ?`,
			sb.Name, sb.Template, sb.Runtime, sb.CPUs, sb.MemoryMiB, sb.DiskMiB, env, md, nullTS(sb.ExpiresAt),
			string(sb.Desired), string(sb.State), sb.Reason, int64(sb.Generation), sb.Node, sb.ExecID,
			sb.ActivationID, sb.StartFrom, int64(sb.IdleTimeout), sb.IdleAction, encodeEgress(sb.Egress),
			sb.Project, sb.CACert, base64.StdEncoding.EncodeToString(sb.CAKey), ts(at), sb.ID, sb.Version)
		if err != nil {
			return fmt.Errorf("sandbox %s: update: %w", sb.ID, err)
		}
		if n == 1 {
			return appendEvents(ctx, tx, events)
		}
		var stored int64
		err = tx.QueryRow(ctx, `SELECT version FROM sandboxes WHERE id = ?`, sb.ID).Scan(&stored)
		if err != nil {
			return sandboxErr(sb.ID, "update", err)
		}
		return fmt.Errorf("sandbox %s: changed concurrently (version %d, stored %d); re-read and retry: %w",
			sb.ID, sb.Version, stored, errdefs.ErrConflict)
	})
	if err != nil {
		return err
	}
	sb.Version++
	sb.UpdatedAt = at
	return nil
}

// DeleteSandbox implements store.Sandboxes.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	return s.writeOne(ctx, "sandbox "+id, "delete", `DELETE FROM sandboxes WHERE id = ?`, id)
}

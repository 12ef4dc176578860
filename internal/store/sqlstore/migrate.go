package sqlstore

import (
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store/migrations"
)

// CreateMigrationsTable creates, where missing, the table that records the
// migrations a database has had; each backend applies them its own way.
const CreateMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at BIGINT  NOT NULL
)`

// RecordMigration is the statement that records migration (version, name,
// applied_at), run in the migration's own transaction.
const RecordMigration = `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`

// Pending returns the migrations of migs, in order, that a database at
// schema version current still needs. A database past the last of migs is
// refused with ErrFailedPrecondition: this binary would not understand its
// schema.
func Pending(current int, migs []migrations.Migration) ([]migrations.Migration, error) {
	latest := 0
	if len(migs) > 0 {
		latest = migs[len(migs)-1].Version
	}
	if current > latest {
		return nil, fmt.Errorf("database schema is version %d but this binary knows only up to %d; run a newer space: %w",
			current, latest, errdefs.ErrFailedPrecondition)
	}
	var out []migrations.Migration
	for _, m := range migs {
		if m.Version > current {
			out = append(out, m)
		}
	}
	return out, nil
}

// CheckNext refuses to apply m to a database at schema version current
// unless m is the very next step.
func CheckNext(current int, m migrations.Migration) error {
	if m.Version != current+1 {
		return fmt.Errorf("migration %s: database is at version %d, want %d: %w", m.Name, current, m.Version-1, errdefs.ErrFailedPrecondition)
	}
	return nil
}

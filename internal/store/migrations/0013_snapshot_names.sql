-- SPACE schema, version 13: snapshot names (E2B's named snapshots).
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- snapshot_names holds the names a tenant gave its snapshots: a name is
-- unique within its tenant and names one snapshot; naming another snapshot
-- moves it there. Deleting a snapshot deletes its names (the SQLite store
-- turns foreign keys on; PostgreSQL always enforces them).
CREATE TABLE snapshot_names (
    tenant_id   TEXT   NOT NULL,
    name        TEXT   NOT NULL,
    snapshot_id TEXT   NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
CREATE INDEX snapshot_names_snapshot ON snapshot_names (snapshot_id);

-- SPACE schema, version 2: sandbox snapshots.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- The snapshot the sandbox's current execution starts from; '' means the
-- template.
ALTER TABLE sandboxes ADD COLUMN start_from TEXT NOT NULL DEFAULT '';

-- A snapshot row outlives its sandbox's row (no foreign key to sandboxes):
-- its files may still need to be removed from a node or object storage, and a
-- fork or restore may start from it after the sandbox is gone. node_id is ''
-- once the files live only in object storage. artifacts is JSON owned by the
-- snapshot lifecycle code ('' while node-local only).
CREATE TABLE snapshots (
    id         TEXT    NOT NULL PRIMARY KEY,
    sandbox_id TEXT    NOT NULL,
    tenant_id  TEXT    NOT NULL REFERENCES tenants (id),
    kind       TEXT    NOT NULL,
    tier       TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    node_id    TEXT    NOT NULL,
    runtime    TEXT    NOT NULL,
    template   TEXT    NOT NULL,
    cpus       INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    generation BIGINT  NOT NULL,
    size_bytes BIGINT  NOT NULL,
    artifacts  TEXT    NOT NULL, -- JSON
    created_at BIGINT  NOT NULL,
    updated_at BIGINT  NOT NULL
);
CREATE INDEX snapshots_by_sandbox ON snapshots (sandbox_id, created_at);
CREATE INDEX snapshots_by_tenant ON snapshots (tenant_id);
CREATE INDEX snapshots_by_state ON snapshots (state);

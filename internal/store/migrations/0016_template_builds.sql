-- SPACE schema, version 16: the builds of E2B's template build API
-- (internal/e2bapi tplbuild.go), kept across control-plane restarts and
-- shared by the replicas.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- template_builds holds one row per build: who asked (tenant_id), under
-- which E2B name (alias), the SPACE template it makes (template), its
-- state (waiting, building, ready, error: E2B's), the failure (reason,
-- JSON of E2B's reason; "" otherwise), the build sandbox while one runs
-- (sandbox_id, "" otherwise) and the size sandboxes made from it get
-- (cpus, memory_mib; 0 for the server's default). A running build
-- rewrites updated_at every few seconds: a row left waiting or building
-- whose updated_at stopped moving is a build its server lost.
CREATE TABLE template_builds (
    id         TEXT    NOT NULL PRIMARY KEY,
    tenant_id  TEXT    NOT NULL,
    alias      TEXT    NOT NULL,
    template   TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    reason     TEXT    NOT NULL DEFAULT '',
    sandbox_id TEXT    NOT NULL DEFAULT '',
    cpus       INTEGER NOT NULL DEFAULT 0,
    memory_mib INTEGER NOT NULL DEFAULT 0,
    created_at BIGINT  NOT NULL,
    updated_at BIGINT  NOT NULL
);
CREATE INDEX template_builds_alias ON template_builds (alias);
CREATE INDEX template_builds_state ON template_builds (state);

-- SPACE schema, version 1.
--
-- Portable SQL: every statement here must run unchanged on SQLite and
-- PostgreSQL. Hence: TEXT, INTEGER, BIGINT and BOOLEAN only; times as BIGINT
-- Unix nanoseconds (UTC); byte strings as base64 TEXT; JSON as TEXT; no
-- AUTOINCREMENT or SERIAL (sequence numbers are computed in the writing
-- transaction); "ON CONFLICT … DO UPDATE" upserts, which both support.

CREATE TABLE tenants (
    id         TEXT   NOT NULL PRIMARY KEY,
    name       TEXT   NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE api_keys (
    id         TEXT    NOT NULL PRIMARY KEY,
    tenant_id  TEXT    NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    hash       TEXT    NOT NULL,
    admin      BOOLEAN NOT NULL,
    created_at BIGINT  NOT NULL,
    revoked_at BIGINT              -- NULL while the key is valid
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, created_at);

-- A sandbox row holds desired state (desired_state) and the state last
-- observed or entered (state); version is the optimistic concurrency counter.
-- node_id is '' until the sandbox is placed; it is not a foreign key because a
-- node's record may be removed while sandbox rows still name it.
CREATE TABLE sandboxes (
    id            TEXT    NOT NULL PRIMARY KEY,
    tenant_id     TEXT    NOT NULL REFERENCES tenants (id),
    name          TEXT    NOT NULL,
    template      TEXT    NOT NULL,
    runtime       TEXT    NOT NULL,
    cpus          INTEGER NOT NULL,
    memory_mib    INTEGER NOT NULL,
    disk_mib      INTEGER NOT NULL,
    env           TEXT    NOT NULL, -- JSON object
    metadata      TEXT    NOT NULL, -- JSON object
    created_at    BIGINT  NOT NULL,
    expires_at    BIGINT,           -- NULL: no timeout
    desired_state TEXT    NOT NULL,
    state         TEXT    NOT NULL,
    reason        TEXT    NOT NULL,
    generation    BIGINT  NOT NULL,
    node_id       TEXT    NOT NULL,
    exec_id       TEXT    NOT NULL,
    activation_id TEXT    NOT NULL,
    version       BIGINT  NOT NULL,
    updated_at    BIGINT  NOT NULL
);
CREATE INDEX sandboxes_by_tenant ON sandboxes (tenant_id, created_at);
CREATE INDEX sandboxes_by_node ON sandboxes (node_id);
CREATE INDEX sandboxes_by_template ON sandboxes (template);

CREATE TABLE templates (
    name       TEXT   NOT NULL PRIMARY KEY,
    source     TEXT   NOT NULL,
    state      TEXT   NOT NULL,
    reason     TEXT   NOT NULL,
    size_bytes BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE nodes (
    id             TEXT    NOT NULL PRIMARY KEY,
    address        TEXT    NOT NULL,
    cpus           INTEGER NOT NULL,
    memory_mib     INTEGER NOT NULL,
    disk_mib       INTEGER NOT NULL,
    runtimes       TEXT    NOT NULL, -- comma-separated
    state          TEXT    NOT NULL,
    registered_at  BIGINT  NOT NULL,
    last_heartbeat BIGINT  NOT NULL
);

CREATE TABLE idempotency (
    tenant_id   TEXT    NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    idem_key    TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    status      INTEGER NOT NULL,
    body        TEXT    NOT NULL, -- base64
    created_at  BIGINT  NOT NULL,
    PRIMARY KEY (tenant_id, idem_key)
);
CREATE INDEX idempotency_by_created ON idempotency (created_at);

-- Append-only; rows outlive their sandbox (no foreign key).
CREATE TABLE sandbox_events (
    sandbox_id TEXT   NOT NULL,
    seq        BIGINT NOT NULL,
    at         BIGINT NOT NULL,
    type       TEXT   NOT NULL,
    message    TEXT   NOT NULL,
    PRIMARY KEY (sandbox_id, seq)
);

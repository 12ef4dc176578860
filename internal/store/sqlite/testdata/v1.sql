-- A SPACE database at schema version 1, as the first release wrote it, with a
-- little data. Frozen: never edit; add a file for each later version.
CREATE TABLE schema_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at BIGINT  NOT NULL
);
INSERT INTO schema_migrations VALUES (1, '0001_init', 1767225600000000000);
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
INSERT INTO tenants VALUES ('t-aaaaaaaaaaaaaaaa', 'acme', 1767225600000000000);
INSERT INTO api_keys VALUES ('k-bbbbbbbbbbbbbbbb', 't-aaaaaaaaaaaaaaaa', '5a1e0000000000000000000000000000000000000000000000000000000000aa', 1, 1767225600000000000, NULL);
INSERT INTO sandboxes VALUES ('cccccccccccccccccccc', 't-aaaaaaaaaaaaaaaa', 'old', 'minimal', 'ns', 1, 512, 2048,
    '{"A":"1"}', '{}', 1767225600000000000, NULL, 'running', 'running', '', 3, 'node-1',
    'cccccccccccccccccccc-g3-dddddddd', 'a-eeeeeeeeeeeeeeee', 7, 1767225601000000000);
INSERT INTO templates VALUES ('minimal', 'builtin:minimal', 'ready', '', 2097152, 1767225600000000000, 1767225600000000000);
INSERT INTO nodes VALUES ('node-1', 'unix:///run/space/node.sock', 2, 4096, 100000, 'ns', 'ready', 1767225600000000000, 1767225600000000000);
INSERT INTO idempotency VALUES ('t-aaaaaaaaaaaaaaaa', 'req-1', 'fp', 201, 'e30=', 1767225600000000000);
INSERT INTO sandbox_events VALUES ('cccccccccccccccccccc', 1, 1767225600000000000, 'state', 'creating');

-- SPACE schema, version 5: credential injection.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- project is the sandbox's project ('' for none): credentials scoped to a
-- project apply to its sandboxes.
ALTER TABLE sandboxes ADD COLUMN project TEXT NOT NULL DEFAULT '';

-- ca_cert is the sandbox's interception CA certificate (PEM) and ca_key its
-- private key sealed by the control plane (base64). '' marks a sandbox
-- recorded before this version: it gets a CA at its next start.
ALTER TABLE sandboxes ADD COLUMN ca_cert TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN ca_key TEXT NOT NULL DEFAULT '';

-- credentials indexes the credentials of each tenant: their metadata (JSON,
-- never the secret, which lives only in the credential backend) and when
-- they were made. No foreign key to tenants: deleting a tenant removes its
-- credentials from the backend first, then these rows.
CREATE TABLE credentials (
    id         TEXT   NOT NULL PRIMARY KEY,
    tenant_id  TEXT   NOT NULL,
    project    TEXT   NOT NULL,
    sandbox_id TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    metadata   TEXT   NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX credentials_by_tenant ON credentials (tenant_id, created_at);

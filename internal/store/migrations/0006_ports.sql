-- SPACE schema, version 6: ServicePort ingress.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- sandbox_ports holds the exposed ports of each sandbox: the protocol the
-- ingress speaks to it ('http' or 'tcp'), whether it is public (no
-- credentials needed) and, for a private port, the hex SHA-256 of its
-- access token ('' for a public one; the token itself is never stored).
-- Deleting a sandbox's row deletes its ports (the SQLite store turns
-- foreign keys on; PostgreSQL always enforces them).
CREATE TABLE sandbox_ports (
    sandbox_id TEXT    NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    port       INTEGER NOT NULL,
    protocol   TEXT    NOT NULL,
    public     BOOLEAN NOT NULL,
    token_hash TEXT    NOT NULL,
    created_at BIGINT  NOT NULL,
    PRIMARY KEY (sandbox_id, port)
);

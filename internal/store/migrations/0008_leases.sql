-- SPACE schema, version 8: leases.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- leases holds one row per lease name: its holder ('' once released), its
-- fencing token and when it expires (Unix nanoseconds, 0 once released).
-- token grows by one with every acquisition by a new holder or after expiry
-- and never goes back; a released lease keeps its row, so the next
-- acquisition still gets a greater token.
CREATE TABLE leases (
    name        TEXT   NOT NULL PRIMARY KEY,
    holder      TEXT   NOT NULL,
    token       BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    acquired_at BIGINT NOT NULL
);

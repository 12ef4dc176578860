-- SPACE schema, version 11: the control-plane replicas' own addresses.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- replica_addresses holds, per control-plane replica (one process
-- incarnation), the addresses it knows itself by: its listener's and those
-- its nodes reach it at, as a JSON array of IP address strings, until
-- expires_at (Unix nanoseconds). Every replica adds the others' to the
-- internal-service list it sends nodes, so that no sandbox reaches any
-- replica of the control plane (docs/network.md).
CREATE TABLE replica_addresses (
    replica    TEXT   NOT NULL PRIMARY KEY,
    addresses  TEXT   NOT NULL,
    expires_at BIGINT NOT NULL
);

-- SPACE schema, version 9: node reports shared between replicas.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- node_reports holds, per node, what its last heartbeat told whichever
-- control-plane replica received it: the node's API token sealed with the
-- replicas' shared key (never in the clear), its execution list as JSON the
-- control plane owns, and when the report was received (Unix nanoseconds).
-- Any replica can then call the node and judge its executions.
CREATE TABLE node_reports (
    node_id      TEXT   NOT NULL PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
    sealed_token TEXT   NOT NULL,
    executions   TEXT   NOT NULL,
    reported_at  BIGINT NOT NULL
);

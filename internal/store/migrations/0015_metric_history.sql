-- SPACE schema, version 15: a sandbox's metrics history (GET
-- /v1/sandboxes/{id}/metrics, E2B's getMetrics), kept across control-plane
-- restarts and shared by the replicas.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- sandbox_metrics holds one row per sandbox: its whole series, at most
-- MetricsKeep (360) samples merged as internal/e2bapi/history.go says,
-- encoded as a JSON array (store.MetricSample). A series is rewritten
-- whole, in batches of every series that changed (one transaction a
-- flush), not a row per sample. Deleting the sandbox's row deletes its
-- series.
CREATE TABLE sandbox_metrics (
    sandbox_id TEXT   NOT NULL PRIMARY KEY REFERENCES sandboxes (id) ON DELETE CASCADE,
    samples    TEXT   NOT NULL,
    updated_at BIGINT NOT NULL
);

-- SPACE schema, version 14: the Host a port's requests carry (E2B's
-- network.maskRequestHost).
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- host_mask is the Host header the ingress sends to the sandbox's port in
-- place of the request's own, "${PORT}" replaced with the port; '' (every
-- row before this version) sends the request's Host as it came.
ALTER TABLE sandbox_ports ADD COLUMN host_mask TEXT NOT NULL DEFAULT '';

-- SPACE schema, version 17: the node a template exists on alone.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- node is the one node that holds a template built from a source only that
-- node had (snapshot:ID, a Dockerfile or E2B build's last step); new
-- executions of the template are placed there. '' (every row before this
-- version) is a template every node can build from its source.
ALTER TABLE templates ADD COLUMN node TEXT NOT NULL DEFAULT '';

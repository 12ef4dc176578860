-- SPACE schema, version 7: a template's default egress policy.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- egress is the egress policy (JSON of internal/egress Spec) a sandbox made
-- from this template gets when its create names none; '' for none (the
-- server's default applies).
ALTER TABLE templates ADD COLUMN egress TEXT NOT NULL DEFAULT '';

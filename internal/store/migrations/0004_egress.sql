-- SPACE schema, version 4: each sandbox's egress policy.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- egress is the sandbox's egress policy in its JSON form (internal/egress
-- Spec). '' marks a sandbox recorded before this version: it has no policy
-- of its own and follows the control plane's default (--default-egress, else
-- {"allow_internet": true}) until one is set with PUT .../egress.
ALTER TABLE sandboxes ADD COLUMN egress TEXT NOT NULL DEFAULT '';

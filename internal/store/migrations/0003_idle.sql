-- SPACE schema, version 3: idle handling.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- After idle_timeout nanoseconds without a request (0: never) the sandbox is
-- paused or hibernated (idle_action), and the next request resumes it.
ALTER TABLE sandboxes ADD COLUMN idle_timeout BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN idle_action TEXT NOT NULL DEFAULT '';

-- SPACE schema, version 12: progress of long operations.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- progress is a template build's latest reading (JSON of an
-- internal/progress Report), '' before the first.
ALTER TABLE templates ADD COLUMN progress TEXT NOT NULL DEFAULT '';

-- progress is the reading a "progress" event carries (JSON of an
-- internal/progress Report), '' for other events.
ALTER TABLE sandbox_events ADD COLUMN progress TEXT NOT NULL DEFAULT '';

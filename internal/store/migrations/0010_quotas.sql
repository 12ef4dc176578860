-- SPACE schema, version 10: tenant quotas.
--
-- Portable SQL, as in 0001_init.sql: every statement must run unchanged on
-- SQLite and PostgreSQL.

-- The most a tenant's sandboxes that hold resources (every state but
-- hibernated, stopped, failed and deleted) may count and use together; 0 is
-- unlimited, which is what every existing tenant gets.
ALTER TABLE tenants ADD COLUMN max_sandboxes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tenants ADD COLUMN max_memory_mib INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tenants ADD COLUMN max_cpus INTEGER NOT NULL DEFAULT 0;

-- Admission counts a tenant's sandboxes by state.
CREATE INDEX sandboxes_by_tenant_state ON sandboxes (tenant_id, state);

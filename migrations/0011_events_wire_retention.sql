-- The wire-log retention's janitor (AGENTD_WIRE_LOG_RETENTION, default 30 days) walks the
-- wire-log events by age; the other events (kept by default) are not in this index, so a
-- batch never scans past them. Expand-only: a new index. It blocks inserts into events
-- while it builds: on a large events table create it first by hand with
--   CREATE INDEX CONCURRENTLY events_wire_created ON events (created_at, id)
--       WHERE name = 'llm.request' OR name LIKE 'mcp.%';
-- and this migration finds it there.
CREATE INDEX IF NOT EXISTS events_wire_created ON events (created_at, id)
    WHERE name = 'llm.request' OR name LIKE 'mcp.%';

-- name: mcp_session_upsert :one
-- ToolDiscovery; one row per loop and server.
-- $1 loop_id uuid · $2 mcp_name text · $3 session_id text · $4 transport_kind text · $5 metadata jsonb
INSERT INTO mcp_sessions (loop_id, mcp_name, session_id, transport_kind, metadata)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (loop_id, mcp_name) DO UPDATE
SET session_id = EXCLUDED.session_id, transport_kind = EXCLUDED.transport_kind,
    metadata = EXCLUDED.metadata, updated_at = now()
RETURNING *;

-- name: mcp_session_list :many
-- Engine and admin; no fence.
-- $1 loop_id uuid
SELECT * FROM mcp_sessions WHERE loop_id = $1 ORDER BY id;

-- name: mcp_session_set_id :exec
-- Tool execution after a session recovery.
-- $1 loop_id uuid · $2 mcp_name text · $3 session_id text
UPDATE mcp_sessions SET session_id = $3, updated_at = now()
WHERE loop_id = $1 AND mcp_name = $2;

-- name: mcp_session_end_claim :many
-- McpSessionEnder: a batch of the stored HTTP sessions of loops completed, failed or
-- stopped for `grace` seconds (by the database's clock), their ids forgotten in this
-- statement; the caller commits, THEN sends each DELETE, so a session is ended at most
-- once, by one worker, and a loop continued later opens a new one (the MCP client
-- initializes on a NULL id). Both rows SKIP LOCKED: a continue holding the loop is
-- passed over (next sweep), one after sees the id gone. Synthetic ('stateless-') ids,
-- stdio/in-process sessions and the sessions a worker shares among its loops
-- (metadata.shared, `session = "process"`) are never ended.
-- $1 grace float8 · $2 batch int
WITH c AS (
    SELECT s.id, s.session_id, l.id AS loop_id, l.agent, l.subject, l.state, l.step_count
    FROM mcp_sessions s JOIN loops l ON l.id = s.loop_id
    WHERE l.status IN ('completed', 'failed', 'stopped')
      AND l.updated_at < now() - make_interval(secs => $1::float8)
      AND s.transport_kind = 'http' AND s.session_id IS NOT NULL
      AND s.session_id NOT LIKE 'stateless-%'
      AND NOT (s.metadata ? 'shared')  -- a worker's shared session: other loops use it
    ORDER BY s.id
    LIMIT $2
    FOR NO KEY UPDATE OF s SKIP LOCKED
    FOR SHARE OF l SKIP LOCKED
)
UPDATE mcp_sessions m SET session_id = NULL, updated_at = now()
FROM c WHERE m.id = c.id
RETURNING m.id, m.mcp_name, c.session_id AS ended_session_id, c.loop_id, c.agent,
          c.subject, c.state, c.step_count;

-- name: mcp_tool_replace :exec
-- ToolDiscovery; replaces a loop's advertised tools. Runs again when a first turn is
-- retried (reaped, released), so names already present are updated in place: a CTE's
-- DELETE is invisible to the INSERT beside it, which would hit the unique (loop_id, name).
-- $1 loop_id uuid · $2 session_ids bigint[] · $3 names text[] · $4 remote_names text[] · $5 descriptions text[] · $6 schemas jsonb[] · $7 approvals bool[]
WITH d AS (DELETE FROM mcp_tools WHERE loop_id = $1 AND name <> ALL($3::text[]))
INSERT INTO mcp_tools (loop_id, mcp_session_id, name, remote_name, description, input_schema,
                       requires_approval)
SELECT $1, s, n, r, d, sc, a
FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::bool[])
     AS x(s, n, r, d, sc, a)
ON CONFLICT (loop_id, name) DO UPDATE
SET mcp_session_id = EXCLUDED.mcp_session_id, remote_name = EXCLUDED.remote_name,
    description = EXCLUDED.description, input_schema = EXCLUDED.input_schema,
    requires_approval = EXCLUDED.requires_approval;

-- name: mcp_tool_list :many
-- NetworkCalling (advertise) and ToolExecution (resolve); no fence.
-- $1 loop_id uuid
SELECT t.*, s.mcp_name, s.session_id, s.transport_kind,
       s.metadata -> 'taskTools' ->> t.remote_name AS task_support
FROM mcp_tools t JOIN mcp_sessions s ON s.id = t.mcp_session_id
WHERE t.loop_id = $1 ORDER BY t.id;

-- name: mcp_inbound_session_insert :one
-- Mounted MCP endpoint on initialize; a session id already taken returns nothing.
-- $1 server_name text · $2 session_id text · $3 principal text · $4 protocol_version text
INSERT INTO mcp_inbound_sessions (server_name, session_id, principal, protocol_version)
VALUES ($1, $2, $3, $4)
ON CONFLICT (session_id) DO NOTHING
RETURNING *;

-- name: mcp_inbound_session_upsert_stateless :one
-- Mounted MCP endpoint, 2026-07-28 era: the per-principal, per-day pseudo-session that
-- ties stateless requests' events together; never terminated, pruned by age like the rest.
-- $1 server_name text · $2 session_id text · $3 principal text · $4 protocol_version text
INSERT INTO mcp_inbound_sessions (server_name, session_id, principal, protocol_version)
VALUES ($1, $2, $3, $4)
ON CONFLICT (session_id) DO UPDATE SET last_used_at = now()
RETURNING *;

-- name: mcp_inbound_session_touch :one
-- Mounted MCP endpoint on every request; unknown, terminated or another principal's
-- sessions return nothing.
-- $1 server_name text · $2 session_id text · $3 principal text
UPDATE mcp_inbound_sessions SET last_used_at = now()
WHERE server_name = $1 AND session_id = $2 AND terminated_at IS NULL
  AND principal IS NOT DISTINCT FROM $3
RETURNING *;

-- name: mcp_inbound_session_terminate :one
-- Mounted MCP endpoint on DELETE; the row is kept for audit. Same match as touch.
-- $1 server_name text · $2 session_id text · $3 principal text
UPDATE mcp_inbound_sessions SET terminated_at = now(), last_used_at = now()
WHERE server_name = $1 AND session_id = $2 AND terminated_at IS NULL
  AND principal IS NOT DISTINCT FROM $3
RETURNING *;

-- name: mcp_inbound_session_prune :val
-- Janitor; by creation age; their events go with them.
-- $1 cutoff timestamptz · $2 batch int
WITH s AS (
    SELECT id FROM mcp_inbound_sessions WHERE created_at < $1 ORDER BY id LIMIT $2
), e AS (
    DELETE FROM events WHERE inbound_session_id IN (SELECT id FROM s)
), d AS (
    DELETE FROM mcp_inbound_sessions WHERE id IN (SELECT id FROM s) RETURNING 1
)
SELECT count(*)::bigint FROM d;

-- name: mcp_inbound_session_list :many
-- Admin: inbound MCP sessions, newest first, keyset on the primary key; no fence.
-- $1 before_id bigint|null · $2 limit int
SELECT * FROM mcp_inbound_sessions
WHERE ($1::bigint IS NULL OR id < $1)
ORDER BY id DESC
LIMIT $2;

-- name: mcp_inbound_session_get :one
-- Admin: one inbound MCP session; no fence.
-- $1 id bigint
SELECT * FROM mcp_inbound_sessions WHERE id = $1;

-- name: mcp_discovery_record :one
-- ToolDiscovery: what a discovery found, recorded in ONE statement (one round trip, one
-- commit, a cached plan) from ONE jsonb document ($1) whose fields are declared in `f`.
-- Fence: the loop row, locked FOR NO KEY UPDATE first (the engine's lock order: the loop,
-- then its rows), still on the turn's execution token; every write below reads from that
-- lock, so a lost fence writes nothing and returns fenced = false. Then, as the
-- mcp_session_upsert / mcp_tool_replace / event_insert_many sequence does: the sessions
-- and tools through agentd_mcp_discovery_record (one session per server upserted, the
-- loop's tools replaced: one already present by name is updated in place, one no longer
-- advertised is deleted; it returns them as mcp_tool_list shows them), and the wire-log
-- events.
-- A key missing from the document reads as null, like a JSON null.
-- $1 discovery jsonb (built by store/mcp.py record_discovery)
WITH f AS (
    SELECT * FROM jsonb_to_record($1::jsonb) AS f(
        loop_id uuid, execution_token uuid,
        sessions jsonb,               -- array: {mcp_name, session_id, transport_kind, metadata}
        tools jsonb,                  -- array: {server, name, remote_name, description,
                                      --         input_schema, requires_approval}
        events jsonb                  -- array, one object per event: see `ev`
    )
), lk AS (
    SELECT l.id FROM loops l, f
    -- the id as a scalar subquery: a primary-key lookup, whatever the planner guesses of f
    WHERE l.id = (SELECT f.loop_id FROM f) AND l.execution_token = f.execution_token
    FOR NO KEY UPDATE OF l
), w AS (
    -- functions/mcp_discovery.sql: written as the finalize of a turn over shared sessions writes them
    SELECT w.tool FROM lk, f, agentd_mcp_discovery_record(lk.id, f.sessions, f.tools) AS w(tool)
), ev AS (
    INSERT INTO events (loop_id, name, reason, http_method, url, status, request_data,
                        response_data, duration, log, tool_call_id, message_id,
                        inbound_session_id)
    SELECT e.loop_id, e.name, e.reason, e.http_method, e.url, e.status, e.request_data,
           e.response_data, e.duration, e.log, e.tool_call_id, e.message_id,
           e.inbound_session_id
    FROM lk, f, jsonb_to_recordset(f.events) AS e(
        loop_id uuid, name text, reason text, http_method text, url text, status int,
        request_data jsonb, response_data jsonb, duration float8, log text,
        tool_call_id bigint, message_id bigint, inbound_session_id bigint
    )
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lk) AS fenced,
       (SELECT count(*) FROM ev) AS events_inserted,
       (SELECT coalesce(json_agg(w.tool ORDER BY (w.tool ->> 'id')::bigint), '[]'::json)
        FROM w) AS tools;

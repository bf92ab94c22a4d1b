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

-- name: mcp_tool_replace :exec
-- ToolDiscovery; replaces a loop's advertised tools.
-- $1 loop_id uuid · $2 session_ids bigint[] · $3 names text[] · $4 remote_names text[] · $5 descriptions text[] · $6 schemas jsonb[] · $7 approvals bool[]
WITH d AS (DELETE FROM mcp_tools WHERE loop_id = $1)
INSERT INTO mcp_tools (loop_id, mcp_session_id, name, remote_name, description, input_schema,
                       requires_approval)
SELECT $1, s, n, r, d, sc, a
FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::bool[])
     AS x(s, n, r, d, sc, a);

-- name: mcp_tool_list :many
-- NetworkCalling (advertise) and ToolExecution (resolve); no fence.
-- $1 loop_id uuid
SELECT t.*, s.mcp_name, s.session_id, s.transport_kind
FROM mcp_tools t JOIN mcp_sessions s ON s.id = t.mcp_session_id
WHERE t.loop_id = $1 ORDER BY t.id;

-- name: mcp_inbound_session_insert :one
-- Mounted MCP endpoint on initialize.
-- $1 server_name text · $2 session_id text · $3 principal text · $4 protocol_version text
INSERT INTO mcp_inbound_sessions (server_name, session_id, principal, protocol_version)
VALUES ($1, $2, $3, $4)
RETURNING *;

-- name: mcp_inbound_session_touch :one
-- Mounted MCP endpoint on every request; unknown or terminated sessions return nothing.
-- $1 server_name text · $2 session_id text
UPDATE mcp_inbound_sessions SET last_used_at = now()
WHERE server_name = $1 AND session_id = $2 AND terminated_at IS NULL
RETURNING *;

-- name: mcp_inbound_session_terminate :one
-- Mounted MCP endpoint on DELETE; the row is kept for audit.
-- $1 server_name text · $2 session_id text
UPDATE mcp_inbound_sessions SET terminated_at = now()
WHERE server_name = $1 AND session_id = $2 AND terminated_at IS NULL
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

-- Rows in states no production path writes directly, for agentd.testing.factories only:
-- unfenced inserts and the database clock. Never called by the engine or the API.

-- name: fixture_clock :val
-- The database's clock: factories give times relative to it.
SELECT clock_timestamp();

-- name: fixture_shell :one
-- A hidden processing shell of any generation (an orphan, too): the store's fenced
-- insert (message_insert_shell) refuses a token the loop is not running on.
-- $1 loop_id uuid · $2 step int · $3 execution_token uuid
INSERT INTO messages (loop_id, role, content, hidden, status, step, execution_token)
VALUES ($1, 'assistant', '', true, 'processing', $2, $3)
RETURNING *;

-- name: fixture_visible_assistant :one
-- The visible assistant message of a loop's step, if any.
-- $1 loop_id uuid · $2 step int
SELECT * FROM messages
WHERE loop_id = $1 AND role = 'assistant' AND step = $2 AND NOT hidden;

-- name: fixture_tool_call_count :val
-- $1 message_id bigint
SELECT count(*) FROM tool_calls WHERE message_id = $1;

-- name: fixture_worker_dead :exec
-- A worker row whose heartbeat backend does not exist.
-- $1 id uuid · $2 queues text[]
INSERT INTO workers (id, hostname, pid, queues, backend_pid, backend_start, heartbeat_at)
VALUES ($1, 'gone', 1, $2, 0, now(), now());

-- name: fixture_worker_here :exec
-- A worker row whose heartbeat backend is this connection's.
-- $1 id uuid · $2 queues text[] · $3 heartbeat_ago float
INSERT INTO workers (id, hostname, pid, queues, backend_pid, backend_start, heartbeat_at)
SELECT $1, 'here', 1, $2, pg_backend_pid(), a.backend_start,
       clock_timestamp() - make_interval(secs => $3)
FROM pg_stat_activity a WHERE a.pid = pg_backend_pid();

-- name: fixture_mcp_tools :exec
-- A loop's discovered tools (name -> requires_approval) without a discovery.
-- $1 loop_id uuid · $2 mcp_session_id bigint · $3 names text[] · $4 approvals bool[]
INSERT INTO mcp_tools (loop_id, mcp_session_id, name, remote_name, requires_approval)
SELECT $1, $2, n, n, a FROM unnest($3::text[], $4::bool[]) AS x(n, a);

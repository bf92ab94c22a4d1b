-- name: message_insert :one
-- Lifecycle (user messages) and finalizers; no fence of its own (callers hold the loop lock).
-- $1 loop_id uuid · $2 role text · $3 content text · $4 reasoning text · $5 step int · $6 execution_token uuid · $7 tool_call_id bigint · $8 metadata jsonb · $9 tokens_prompt int · $10 tokens_completion int · $11 tokens_cached int · $12 ttft float · $13 duration float · $14 finish_reason text
INSERT INTO messages (loop_id, role, content, reasoning, step, execution_token, tool_call_id,
                      metadata, tokens_prompt, tokens_completion, tokens_cached, ttft, duration,
                      finish_reason)
VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8, '{}'::jsonb), $9, $10, $11, $12, $13, $14)
RETURNING *;

-- name: message_insert_tool_result :one
-- ResponseCreation; idempotent: a second result for the same call inserts nothing.
-- $1 loop_id uuid · $2 content text · $3 tool_call_id bigint · $4 metadata jsonb
INSERT INTO messages (loop_id, role, content, tool_call_id, metadata)
VALUES ($1, 'tool', $2, $3, $4)
ON CONFLICT (tool_call_id) WHERE role = 'tool' DO NOTHING
RETURNING *;

-- name: message_insert_shell :one
-- NetworkCalling before a streamed call: a hidden `processing` assistant shell.
-- $1 loop_id uuid · $2 step int · $3 execution_token uuid
INSERT INTO messages (loop_id, role, content, hidden, status, step, execution_token)
VALUES ($1, 'assistant', '', true, 'processing', $2, $3)
RETURNING *;

-- name: message_update_partial :exec
-- NetworkCalling while streaming (throttled); fence: still processing under this token.
-- $1 id bigint · $2 content text · $3 reasoning text · $4 execution_token uuid
UPDATE messages SET content = $2, reasoning = $3, updated_at = now()
WHERE id = $1 AND status = 'processing' AND execution_token = $4;

-- name: message_promote_shell :one
-- ResponseParsing, inside the fenced finalize transaction: the shell becomes canonical.
-- $1 id bigint · $2 content text · $3 reasoning text · $4 metadata jsonb · $5 tokens_prompt int · $6 tokens_completion int · $7 tokens_cached int · $8 ttft float · $9 duration float · $10 finish_reason text · $11 step int
UPDATE messages
SET content = $2, reasoning = $3, metadata = $4, tokens_prompt = $5, tokens_completion = $6,
    tokens_cached = $7, ttft = $8, duration = $9, finish_reason = $10, step = $11,
    hidden = false, status = 'completed', updated_at = now()
WHERE id = $1 AND status = 'processing'
RETURNING *;

-- name: message_fail_shells :exec
-- Pause/stop/reaper: orphaned processing shells become failed and hidden.
-- $1 loop_id uuid
UPDATE messages SET status = 'failed', hidden = true, updated_at = now()
WHERE loop_id = $1 AND status = 'processing';

-- name: message_reap_orphans :val
-- Reaper case 5: processing shells whose loop moved on (other generation or not running).
-- $1 grace_seconds float
WITH u AS (
    UPDATE messages m SET status = 'failed', hidden = true, updated_at = now()
    FROM loops l
    WHERE m.status = 'processing' AND l.id = m.loop_id
      AND m.updated_at < now() - make_interval(secs => $1)
      AND (l.status <> 'running' OR l.execution_token IS DISTINCT FROM m.execution_token)
    RETURNING m.id
)
SELECT count(*)::bigint FROM u;

-- name: message_list :many
-- Prompt building and the transcript API; hidden rows only when asked.
-- $1 loop_id uuid · $2 include_hidden bool
SELECT * FROM messages
WHERE loop_id = $1 AND ($2 OR NOT hidden)
ORDER BY id;

-- name: message_list_after :many
-- Live streams (SSE): visible messages of a loop after a watermark, to send or replay; no fence.
-- $1 loop_id uuid · $2 after_id bigint
SELECT * FROM messages
WHERE loop_id = $1 AND id > $2 AND NOT hidden
ORDER BY id;

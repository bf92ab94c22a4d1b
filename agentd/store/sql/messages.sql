-- name: message_insert :one
-- Lifecycle (user messages) and finalizers; no fence of its own (callers hold the loop lock).
-- $1 loop_id uuid · $2 role text · $3 content text · $4 reasoning text · $5 step int · $6 execution_token uuid · $7 tool_call_id bigint · $8 metadata jsonb · $9 tokens_prompt int · $10 tokens_completion int · $11 tokens_cached int · $12 ttft float · $13 duration float · $14 finish_reason text · $15 tokens_estimated bool · $16 summary_through bigint|null
INSERT INTO messages (loop_id, role, content, reasoning, step, execution_token, tool_call_id,
                      metadata, tokens_prompt, tokens_completion, tokens_cached, ttft, duration,
                      finish_reason, tokens_estimated, summary_through)
VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8, '{}'::jsonb), $9, $10, $11, $12, $13, $14,
        coalesce($15, false), $16)
RETURNING *;

-- name: message_insert_tool_result :one
-- ResponseCreation; idempotent: a second result for the same call inserts nothing.
-- $1 loop_id uuid · $2 content text · $3 tool_call_id bigint · $4 metadata jsonb
INSERT INTO messages (loop_id, role, content, tool_call_id, metadata)
VALUES ($1, 'tool', $2, $3, $4)
ON CONFLICT (tool_call_id) WHERE role = 'tool' DO NOTHING
RETURNING *;

-- name: message_insert_shell :one
-- NetworkCalling before a streamed call: a hidden `processing` assistant shell; fence: the
-- loop is running on $3 (no row: the turn was reaped or rotated, so it writes nothing —
-- else a stale turn would leave a shell that only the reaper's orphan sweep removes).
-- $1 loop_id uuid · $2 step int · $3 execution_token uuid
INSERT INTO messages (loop_id, role, content, hidden, status, step, execution_token)
SELECT $1, 'assistant', '', true, 'processing', $2, $3
FROM loops WHERE id = $1 AND execution_token = $3 AND status = 'running'
RETURNING *;

-- name: message_update_partial :exec
-- NetworkCalling while streaming (throttled); fence: still processing under this token.
-- $1 id bigint · $2 content text · $3 reasoning text · $4 execution_token uuid
UPDATE messages SET content = $2, reasoning = $3, updated_at = now()
WHERE id = $1 AND status = 'processing' AND execution_token = $4;

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

-- name: message_streaming_shell :one
-- Live streams (admin page): the shell a turn is streaming into, with its saved text.
-- $1 loop_id uuid
SELECT * FROM messages
WHERE loop_id = $1 AND hidden AND role = 'assistant' AND status = 'processing'
ORDER BY id DESC
LIMIT 1;

-- name: message_list_after :many
-- Live streams (SSE): visible messages of a loop after a watermark, to send or replay; no fence.
-- $1 loop_id uuid · $2 after_id bigint
SELECT * FROM messages
WHERE loop_id = $1 AND id > $2 AND NOT hidden
ORDER BY id;

-- name: message_get :one
-- Lifecycle (regenerate, fork) under the loop lock; no fence.
-- $1 id bigint
SELECT * FROM messages WHERE id = $1;

-- name: message_supersede_after :val
-- Lifecycle.regenerate under the loop lock (the token is rotated in the same transaction):
-- every visible row after the message leaves the prompt, except the results of tool calls
-- made at or before it (an assistant message keeps its results).
-- $1 loop_id uuid · $2 after_id bigint
WITH u AS (
    UPDATE messages m SET superseded_at = now(), updated_at = now()
    WHERE m.loop_id = $1 AND m.id > $2 AND m.superseded_at IS NULL AND NOT m.hidden
      AND NOT (m.role = 'tool' AND EXISTS (
              SELECT 1 FROM tool_calls t
              WHERE t.id = m.tool_call_id AND t.message_id <= $2))
    RETURNING m.id
)
SELECT count(*)::bigint FROM u;

-- name: message_copy_for_fork :one
-- Lifecycle.fork, one statement so messages and tool calls come from one snapshot (the
-- source loop keeps running and is never locked or written): visible, non-superseded rows
-- up to and including the message, plus the results of calls made at or before it, become
-- the new loop's rows in the same order; their tool calls are copied with them (leases
-- dropped). Tool results are copied unlinked (tool_call_id is unique among results) and
-- linked to the copied calls, and summaries' coverage re-pointed, by message_relink_fork. Returns the copied counts and the highest step.
-- $1 source_loop_id uuid · $2 new_loop_id uuid · $3 at_message_id bigint
WITH src AS (
    SELECT m.* FROM messages m
    WHERE m.loop_id = $1 AND NOT m.hidden AND m.superseded_at IS NULL
      AND (m.id <= $3
           OR (m.role = 'tool' AND EXISTS (SELECT 1 FROM tool_calls t
                                           WHERE t.id = m.tool_call_id AND t.message_id <= $3)))
), m AS (
    INSERT INTO messages (loop_id, role, content, reasoning, status, step, tool_call_id,
                          metadata, tokens_prompt, tokens_completion, tokens_cached, ttft,
                          duration, finish_reason, error_message, tokens_estimated,
                          summary_through, forked_from_message_id, created_at)
    SELECT $2, role, content, reasoning, status, step, NULL, metadata, tokens_prompt,
           tokens_completion, tokens_cached, ttft, duration, finish_reason, error_message,
           tokens_estimated, summary_through, id, created_at
    FROM src ORDER BY id
    RETURNING id, forked_from_message_id AS old_id
), t AS (
    INSERT INTO tool_calls (loop_id, message_id, position, provider_call_id, name, arguments,
                            arguments_raw, metadata, status, result, structured_result,
                            is_success, error_message, executed_at, attempts,
                            approval_required, approval_status, approval_deadline, decided_at,
                            decided_by, decision_reason, response_message_id, duration,
                            created_at)
    SELECT $2, nm.id, tc.position, tc.provider_call_id, tc.name, tc.arguments,
           tc.arguments_raw, tc.metadata,
           CASE WHEN tc.status = 'running' THEN 'pending' ELSE tc.status END,
           tc.result, tc.structured_result, tc.is_success, tc.error_message, tc.executed_at,
           tc.attempts, tc.approval_required, tc.approval_status, tc.approval_deadline,
           tc.decided_at, tc.decided_by, tc.decision_reason, rm.id, tc.duration, tc.created_at
    FROM tool_calls tc
    JOIN m nm ON nm.old_id = tc.message_id
    LEFT JOIN m rm ON rm.old_id = tc.response_message_id
    ORDER BY tc.id
    RETURNING id
)
SELECT (SELECT count(*) FROM m)::bigint AS messages,
       (SELECT count(*) FROM t)::bigint AS tool_calls,
       (SELECT coalesce(max(step), 0) FROM src)::int AS max_step;

-- name: message_relink_fork :exec
-- Lifecycle.fork, after message_copy_for_fork in the same transaction; touches only the
-- new loop's rows: tool results point at the copied calls, summaries at copied messages.
-- $1 new_loop_id uuid
WITH calls AS (
    SELECT old_tc.id AS old_id, new_tc.id AS new_id
    FROM tool_calls new_tc
    JOIN messages new_m ON new_m.id = new_tc.message_id
    JOIN tool_calls old_tc ON old_tc.message_id = new_m.forked_from_message_id
                          AND old_tc.position = new_tc.position
    WHERE new_tc.loop_id = $1
), results AS (
    UPDATE messages m SET tool_call_id = calls.new_id
    FROM messages src, calls
    WHERE m.loop_id = $1 AND m.role = 'tool' AND src.id = m.forked_from_message_id
      AND src.tool_call_id = calls.old_id
    RETURNING m.id
)
UPDATE messages s
SET summary_through = (SELECT max(c.id) FROM messages c
                       WHERE c.loop_id = $1 AND c.forked_from_message_id <= s.summary_through)
WHERE s.loop_id = $1 AND s.summary_through IS NOT NULL;

-- name: message_update_partial_many :many
-- StreamFlusher, one statement per tick for every streaming shell of the process; fence:
-- still processing under the turn's token. Answers each written shell's loop `observed`
-- flag (read, not locked), so a turn started unobserved publishes once someone subscribes.
-- $1 ids bigint[] · $2 contents text[] · $3 reasonings text[] · $4 tokens uuid[]
UPDATE messages AS m
SET content = x.c, reasoning = x.r, updated_at = now()
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::uuid[]) AS x(id, c, r, tok)
WHERE m.id = x.id AND m.status = 'processing' AND m.execution_token = x.tok
RETURNING m.id, (SELECT l.observed FROM loops AS l WHERE l.id = m.loop_id) AS observed;

-- name: message_cost_by_model :many
-- API /v1/costs: per agent and model, the cost of the model calls (assistant messages and
-- compaction summaries carrying metadata.usage) of the loops created in [$1, $2). Copies
-- made by a fork are left out (the source loop counted them); no fence.
-- $1 since timestamptz · $2 until timestamptz · $3 agent text|null
SELECT l.agent, m.metadata -> 'usage' ->> 'model' AS model,
       sum((m.metadata -> 'usage' ->> 'cost')::numeric) AS cost,
       count(*)::bigint AS turns,
       (count(*) FILTER (WHERE m.metadata -> 'usage' ->> 'cost' IS NULL))::bigint
           AS unpriced_turns
FROM loops l
JOIN messages m ON m.loop_id = l.id
WHERE l.created_at >= $1 AND l.created_at < $2 AND ($3::text IS NULL OR l.agent = $3)
  AND m.metadata ? 'usage' AND NOT m.hidden AND m.forked_from_message_id IS NULL
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: message_final_answer :val
-- engine/children.py: a finished child loop's answer to its parent's call (its last visible
-- assistant message); no fence.
-- $1 loop_id uuid
SELECT content FROM messages
WHERE loop_id = $1 AND role = 'assistant' AND NOT hidden AND superseded_at IS NULL
  AND status = 'completed'
ORDER BY id DESC LIMIT 1;

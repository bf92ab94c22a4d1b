-- name: loop_input_get_by_key :one
-- Lifecycle.send under the loop lock: the input a live Idempotency-Key sent; no fence.
-- $1 loop_id uuid · $2 idempotency_key text
SELECT * FROM loop_inputs WHERE loop_id = $1 AND idempotency_key = $2;

-- name: loop_input_insert :one
-- Lifecycle.send under the loop lock taken by loop_get_for_update: the message as sent,
-- pending, counted on the loop (the finalize of a run's last turn reads the count), and
-- its `loop.message_received` webhook (a delivery per subscribed endpoint) in the same
-- transaction. No fence (the caller checked the status under the lock).
-- $1 loop_id uuid · $2 mode text · $3 content text · $4 idempotency_key text|null · $5 request_hash bytea|null · $6 sent_by text|null
WITH i AS (
    INSERT INTO loop_inputs (loop_id, mode, content, idempotency_key, request_hash, sent_by)
    VALUES ($1, $2, $3, $4, $5, $6)
    RETURNING *
), l AS (
    UPDATE loops SET steer_pending = steer_pending + 1 WHERE id = $1
    RETURNING status
), w AS (
    -- not a data-modifying CTE, so the final SELECT reads it (else it would not run)
    SELECT agentd_webhook_enqueue('loop.message_received', i.loop_id, jsonb_build_object(
               'loop_id', i.loop_id, 'input_id', i.id, 'mode', i.mode,
               'loop_status', l.status, 'sent_by', i.sent_by))
    FROM i, l
)
SELECT i.*, (SELECT count(*) FROM w) AS webhooks FROM i;

-- name: loop_input_apply :many
-- engine/steering.py (a turn's start, fenced by loop_lock_turn) and Lifecycle.send, both
-- under the loop's row lock, taken by an EARLIER statement of the transaction (so this
-- one's snapshot has every send that committed before it). Turns the pending inputs due
-- into user messages, in the order they were sent: every one when $2 or steer_release
-- (the run ended with them pending), else those up to the last non-queue one (a queue
-- message sent before an inject keeps its place). Each message carries its input's id and
-- mode in metadata; the loop's count is set to what is left, steer_release cleared.
-- $1 loop_id uuid · $2 everything bool
WITH p AS (
    SELECT id, mode, content, sent_by FROM loop_inputs
    WHERE loop_id = $1 AND status = 'pending'
    ORDER BY id
    FOR UPDATE
), t AS (
    SELECT CASE WHEN $2 OR (SELECT steer_release FROM loops WHERE id = $1)
                THEN (SELECT max(id) FROM p)
                ELSE (SELECT max(id) FROM p WHERE mode <> 'queue') END AS through
), m AS (
    INSERT INTO messages (loop_id, role, content, metadata)
    SELECT $1, 'user', p.content,
           jsonb_strip_nulls(jsonb_build_object('input_id', p.id, 'mode', p.mode,
                                                'sent_by', p.sent_by))
    FROM p, t WHERE p.id <= t.through
    ORDER BY p.id
    RETURNING id, (metadata ->> 'input_id')::bigint AS input_id
), u AS (
    UPDATE loop_inputs i SET status = 'applied', message_id = m.id, applied_at = now()
    FROM m WHERE i.id = m.input_id
    RETURNING i.*
), l AS (
    UPDATE loops
    SET steer_pending = (SELECT count(*) FROM p) - (SELECT count(*) FROM m),
        steer_release = false
    WHERE id = $1
)
SELECT * FROM u ORDER BY id;

-- name: loop_input_list :many
-- API (GET /v1/loops/{id}/inputs) and the admin loop page: the messages sent to a loop,
-- oldest first; no fence.
-- $1 loop_id uuid · $2 pending_only bool
SELECT * FROM loop_inputs
WHERE loop_id = $1 AND (NOT $2 OR status = 'pending')
ORDER BY id;

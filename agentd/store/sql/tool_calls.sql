-- name: tool_call_insert_many :many
-- ResponseParsing inside the fenced finalize transaction.
-- $1 loop_id uuid · $2 message_id bigint · $3 positions int[] · $4 provider_ids text[] · $5 names text[] · $6 arguments jsonb[] · $7 raws text[] · $8 metadatas jsonb[]
INSERT INTO tool_calls (loop_id, message_id, position, provider_call_id, name, arguments,
                        arguments_raw, metadata)
SELECT $1, $2, p, pid, n, a, r, m
FROM unnest($3::int[], $4::text[], $5::text[], $6::jsonb[], $7::text[], $8::jsonb[])
     AS x(p, pid, n, a, r, m)
RETURNING *;

-- name: tool_call_get :one
-- Readers; no fence.
-- $1 id bigint
SELECT * FROM tool_calls WHERE id = $1;

-- name: tool_call_get_for_update :one
-- Approvals; row lock.
-- $1 id bigint
SELECT * FROM tool_calls WHERE id = $1 FOR NO KEY UPDATE;

-- name: tool_call_list_for_loop :many
-- Transcript and prompt building; no fence.
-- $1 loop_id uuid
SELECT * FROM tool_calls WHERE loop_id = $1 ORDER BY message_id, position;

-- name: tool_call_list_unresolved :many
-- Resume/redispatch and ResponseCreation's chaining, under the loop lock.
-- $1 loop_id uuid
SELECT * FROM tool_calls WHERE loop_id = $1 AND response_message_id IS NULL
ORDER BY message_id, position;

-- name: tool_call_list_live_leases :many
-- Lifecycle.unfreeze under the loop lock: the unanswered calls a worker still holds (a lease
-- not yet expired by the database's clock), which are left to run; no fence.
-- $1 loop_id uuid
SELECT id FROM tool_calls
WHERE loop_id = $1 AND response_message_id IS NULL AND leased_until > now()
ORDER BY id;

-- name: tool_call_checkpoint :one
-- ToolExecution; fence: this lease_token still holds the call and it has no result yet.
-- $1 id bigint · $2 lease_token uuid · $3 result text · $4 structured jsonb · $5 is_success bool · $6 error_message text · $7 duration float
UPDATE tool_calls
SET result = $3, structured_result = $4, is_success = $5, error_message = $6,
    duration = $7, executed_at = now(),
    status = CASE WHEN $5 THEN 'completed' ELSE 'failed' END, updated_at = now()
WHERE id = $1 AND lease_token = $2 AND executed_at IS NULL
RETURNING *;

-- name: tool_call_fail :one
-- Tool ErrorHandling, after a middleware crashed, in the transaction that fails the loop
-- (the loop row is already locked: loop first). The call gets what failed it, is no longer
-- leased, and a checkpointed result is kept. Fence: no result message yet.
-- $1 id bigint · $2 error_message text
UPDATE tool_calls
SET status = CASE WHEN executed_at IS NULL THEN 'failed' ELSE status END,
    is_success = CASE WHEN executed_at IS NULL THEN false ELSE is_success END,
    error_message = coalesce(error_message, $2),
    lease_token = NULL, leased_until = NULL, lease_worker_id = NULL, updated_at = now()
WHERE id = $1 AND response_message_id IS NULL
RETURNING *;

-- name: tool_call_finish :one
-- ResponseCreation, the whole end of a tool call in one round trip: the function
-- (store/sql/functions/tool_call_finish.sql, from one jsonb document whose fields it
-- declares) locks the loop, checks every fence
-- before writing (generation, this lease, unanswered, and with `checkpoint` not yet
-- executed), optionally checkpoints the result, inserts the `tool` message, marks the call
-- responded, then reads the unresolved siblings under the lock: sequential, the next one's
-- job (unless it awaits a decision); none left, the loop back to queued on new_token and
-- the next turn's job — or, chained (a chain_worker), that turn claimed for the worker on
-- new_token and returned with its prefetch (with chain_after, only the messages after that
-- id — the worker holds the rest); the events (`attach` ones get the message id) and the
-- notifications. outcome 'fence_lost': nothing was written.
-- $1 finish jsonb (built by store/tool_calls.py finish)
SELECT * FROM agentd_tool_call_finish($1::jsonb);

-- name: tool_call_finish_many :many
-- Several ends of tool calls in one round trip and one commit (engine/finish_batch.py):
-- `tool_call_finish` for each document, in loop-id order (functions/tool_call_finish.sql); `idx` is the
-- document's place in the array. One document's failure fails them all (nothing written).
-- $1 finishes jsonb (an array of tool_call_finish documents)
SELECT * FROM agentd_tool_call_finish_many($1::jsonb);

-- name: tool_call_park :one
-- ApprovalGate: park the call for a human decision and drop its lease (nothing to reap).
-- The claim that parks it ran nothing, so it gives its attempt back: `attempts` counts the
-- claims that could have invoked the tool (an approved call run once shows 1).
-- $1 id bigint · $2 lease_token uuid · $3 deadline timestamptz|null
UPDATE tool_calls
SET status = 'waiting', approval_required = true, approval_status = 'pending',
    approval_deadline = $3, lease_token = NULL, leased_until = NULL,
    lease_worker_id = NULL, attempts = greatest(attempts - 1, 0), updated_at = now()
WHERE id = $1 AND lease_token = $2 AND response_message_id IS NULL
RETURNING *;

-- name: tool_call_decide :one
-- Approve/deny/expire under the loop lock; only a pending decision can be taken.
-- $1 id bigint · $2 approval_status text · $3 decided_by text · $4 reason text
UPDATE tool_calls
SET approval_status = $2, decided_at = now(), decided_by = $3, decision_reason = $4,
    status = 'pending', updated_at = now()
WHERE id = $1 AND approval_status = 'pending'
RETURNING *;

-- name: tool_call_revoke_leases :exec
-- Resume: revoke the leases of unresolved calls before re-enqueueing them.
-- $1 loop_id uuid
UPDATE tool_calls
SET lease_token = NULL, leased_until = NULL, lease_worker_id = NULL,
    status = CASE WHEN executed_at IS NULL AND status = 'running' THEN 'pending'
                  ELSE status END,
    updated_at = now()
WHERE loop_id = $1 AND response_message_id IS NULL;

-- name: tool_call_list_pending_approval :many
-- API approvals list; no fence.
-- $1 loop_id uuid
SELECT * FROM tool_calls WHERE loop_id = $1 AND approval_status = 'pending' ORDER BY id;

-- name: tool_call_count_pending_approval :val
-- Lifecycle: does the loop still wait on a person (a decision or an MCP input request)?
-- $1 loop_id uuid
SELECT count(*)::bigint FROM tool_calls
WHERE loop_id = $1
  AND (approval_status = 'pending'
       OR (input_status = 'pending' AND response_message_id IS NULL));

-- name: tool_call_reap_stalled :many
-- Reaper case 2: unresolved calls whose lease expired, whose worker died, or that have
-- neither a lease nor a job (a dropped enqueue). Clears the lease and re-enqueues with the
-- loop's current generation; a checkpointed call will replay, not re-run. Lock order loop,
-- then call (docs/security.md), both SKIP LOCKED: a loop or call someone holds is left to
-- the next sweep, and a call changed since it was read here (another row version) is too.
-- $1 dead_workers uuid[] · $2 grace_seconds float · $3 limit int
WITH c AS (
    SELECT tc.id, tc.loop_id, tc.xmin AS v, tc.leased_until IS NOT NULL AS was_leased,
           coalesce(tc.lease_worker_id = ANY($1::uuid[]), false) AS dead_worker
    FROM tool_calls tc JOIN loops l ON l.id = tc.loop_id
    WHERE tc.response_message_id IS NULL
      AND l.status IN ('running', 'waiting') AND NOT l.frozen
      AND tc.approval_status IS DISTINCT FROM 'pending'
      AND tc.input_status IS DISTINCT FROM 'pending'
      -- a call waiting on a live child loop is resumed by the child's end (child_loops.sql)
      AND NOT (tc.leased_until IS NULL AND tc.child_loop_id IS NOT NULL
               AND EXISTS (SELECT 1 FROM loops ch WHERE ch.id = tc.child_loop_id
                             AND (ch.status IN ('init', 'queued', 'running', 'waiting')
                                  OR (ch.status = 'paused' AND ch.status_reason NOT IN
                                      ('max_steps_exceeded', 'token_budget_exceeded',
                                       'cost_budget_exceeded')))))
      AND (tc.leased_until < now()
           OR tc.lease_worker_id = ANY($1::uuid[])
           OR (tc.leased_until IS NULL
               AND tc.updated_at < now() - make_interval(secs => $2)
               AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.tool_call_id = tc.id)
               -- a sequential call behind an unanswered one is waiting its turn, not lost
               AND NOT (coalesce((tc.metadata ->> 'sequential')::boolean, false)
                        AND EXISTS (SELECT 1 FROM tool_calls p
                                    WHERE p.message_id = tc.message_id
                                      AND p.position < tc.position
                                      AND p.response_message_id IS NULL))))
    ORDER BY tc.id
    LIMIT $3
), l AS (
    SELECT lp.id, lp.execution_token FROM loops lp
    WHERE lp.id IN (SELECT loop_id FROM c) AND lp.status IN ('running', 'waiting')
      AND NOT lp.frozen
    ORDER BY lp.id
    FOR NO KEY UPDATE SKIP LOCKED
), r AS (
    SELECT tc.id, l.execution_token, c.was_leased, c.dead_worker
    FROM tool_calls tc JOIN c ON c.id = tc.id JOIN l ON l.id = tc.loop_id
    WHERE tc.xmin = c.v
    ORDER BY tc.id
    FOR NO KEY UPDATE OF tc SKIP LOCKED
), u AS (
    UPDATE tool_calls SET lease_token = NULL, leased_until = NULL, lease_worker_id = NULL,
        status = CASE WHEN executed_at IS NULL THEN 'pending' ELSE status END,
        updated_at = now()
    FROM r WHERE tool_calls.id = r.id
    RETURNING tool_calls.id, tool_calls.loop_id, r.execution_token, r.was_leased,
              r.dead_worker
), j AS (
    INSERT INTO jobs (queue, kind, loop_id, tool_call_id, generation, lease_seconds)
    SELECT 'tool', 'tool_call', loop_id, id, execution_token, NULL FROM u
)
SELECT id, loop_id, was_leased, dead_worker FROM u;

-- name: tool_call_expire_approvals :many
-- Reaper: pending decisions past their deadline are denied as expired and re-enqueued so
-- the ApprovalGate emits the rejection the model sees. Lock order loop, then call, both
-- SKIP LOCKED (a decision under way holds the loop; the next sweep sees what it decided).
-- $1 limit int
WITH c AS (
    SELECT tc.id, tc.loop_id, tc.xmin AS v FROM tool_calls tc JOIN loops l ON l.id = tc.loop_id
    WHERE tc.approval_status = 'pending' AND tc.approval_deadline < now()
      AND l.status IN ('running', 'waiting')
    ORDER BY tc.id LIMIT $1
), l AS (
    SELECT lp.id, lp.execution_token FROM loops lp
    WHERE lp.id IN (SELECT loop_id FROM c) AND lp.status IN ('running', 'waiting')
    ORDER BY lp.id
    FOR NO KEY UPDATE SKIP LOCKED
), r AS (
    SELECT tc.id, l.execution_token
    FROM tool_calls tc JOIN c ON c.id = tc.id JOIN l ON l.id = tc.loop_id
    WHERE tc.xmin = c.v
    ORDER BY tc.id
    FOR NO KEY UPDATE OF tc SKIP LOCKED
), u AS (
    UPDATE tool_calls SET approval_status = 'expired', decided_at = now(),
        decided_by = 'reaper', decision_reason = 'approval deadline passed',
        status = 'pending', updated_at = now()
    FROM r WHERE tool_calls.id = r.id
    RETURNING tool_calls.id, tool_calls.loop_id, r.execution_token
), j AS (
    INSERT INTO jobs (queue, kind, loop_id, tool_call_id, generation)
    SELECT 'tool', 'tool_call', loop_id, id, execution_token FROM u
)
SELECT id, loop_id FROM u;

-- name: tool_call_release_leases :exec
-- Graceful shutdown: give unfinished, unexecuted calls back with a job, at once (a job
-- only while the loop is live: a paused loop re-dispatches on resume). Lock order: the
-- calls' loops (in id order), then the calls.
-- $1 ids bigint[] · $2 tokens uuid[]
WITH x AS (
    SELECT * FROM unnest($1::bigint[], $2::uuid[]) AS x(id, token)
), l AS (
    SELECT lp.id, lp.execution_token, lp.status IN ('running', 'waiting') AS live
    FROM loops lp
    WHERE lp.id IN (SELECT tc.loop_id FROM tool_calls tc JOIN x ON tc.id = x.id)
    ORDER BY lp.id
    FOR NO KEY UPDATE
), r AS (
    SELECT tc.id, l.execution_token, l.live FROM tool_calls tc
    JOIN x ON tc.id = x.id AND tc.lease_token = x.token
    JOIN l ON l.id = tc.loop_id
    WHERE tc.response_message_id IS NULL
    ORDER BY tc.id
    FOR NO KEY UPDATE OF tc
), u AS (
    UPDATE tool_calls SET lease_token = NULL, leased_until = NULL, lease_worker_id = NULL,
        status = CASE WHEN executed_at IS NULL THEN 'pending' ELSE status END,
        updated_at = now()
    FROM r WHERE tool_calls.id = r.id
    RETURNING tool_calls.id, tool_calls.loop_id, r.execution_token, r.live
)
INSERT INTO jobs (queue, kind, loop_id, tool_call_id, generation)
SELECT 'tool', 'tool_call', loop_id, id, execution_token FROM u WHERE live;

-- name: tool_call_release_own :exec
-- A finalize cancelled after its commit may have leased calls to its worker (chaining) that
-- nobody will run: queue them now instead of waiting out the lease. Fence: the tokens.
-- Lock order: the loop, then its calls.
-- $1 loop_id uuid · $2 tokens uuid[]
WITH l AS (
    SELECT id, execution_token FROM loops WHERE id = $1 FOR NO KEY UPDATE
), r AS (
    SELECT tc.id, l.execution_token FROM tool_calls tc JOIN l ON l.id = tc.loop_id
    WHERE tc.lease_token = ANY($2::uuid[])
      AND tc.response_message_id IS NULL AND tc.executed_at IS NULL
    ORDER BY tc.id
    FOR NO KEY UPDATE OF tc
), u AS (
    UPDATE tool_calls SET lease_token = NULL, leased_until = NULL, lease_worker_id = NULL,
        status = 'pending', updated_at = now()
    FROM r WHERE tool_calls.id = r.id
    RETURNING tool_calls.id, tool_calls.loop_id, r.execution_token
)
INSERT INTO jobs (queue, kind, loop_id, tool_call_id, generation)
SELECT 'tool', 'tool_call', loop_id, id, execution_token FROM u;

-- name: tool_call_lease_renew_many :many
-- LeaseRenewer each tick: keeps live tool calls from being reclaimed; fence: lease_token.
-- Written only once less than half of the lease, or less than $4 (two heartbeat intervals),
-- is left; every held lease is returned with the seconds it has left.
-- $1 ids bigint[] · $2 tokens uuid[] · $3 lease_seconds float[] · $4 renew_within float
WITH r AS (
    SELECT tc.id, tc.leased_until FROM tool_calls tc
    JOIN unnest($1::bigint[], $2::uuid[]) AS x(id, token)
      ON tc.id = x.id AND tc.lease_token = x.token AND tc.response_message_id IS NULL
), u AS (
    UPDATE tool_calls SET leased_until = now() + make_interval(secs => x.secs)
    FROM unnest($1::bigint[], $2::uuid[], $3::float8[]) AS x(id, token, secs)
    WHERE tool_calls.id = x.id AND tool_calls.lease_token = x.token
      AND tool_calls.response_message_id IS NULL
      AND (tool_calls.leased_until IS NULL
           OR tool_calls.leased_until
              < now() + make_interval(secs => greatest(x.secs / 2, $4::float8)))
    RETURNING tool_calls.id, tool_calls.leased_until
)
SELECT r.id,
       extract(epoch FROM coalesce(u.leased_until, r.leased_until) - now())::float8 AS remaining
FROM r LEFT JOIN u ON u.id = r.id;

-- name: tool_call_cancel_superseded :val
-- Lifecycle.regenerate under the loop lock, after message_supersede_after and with the token
-- rotated: each unanswered call of a superseded message gets a superseded `cancelled`
-- result, so nothing re-enqueues it and the completion gate never waits for it; a pending
-- approval is denied. Leases are dropped (a running tool's checkpoint then matches nothing).
-- $1 loop_id uuid
WITH c AS (
    SELECT t.id FROM tool_calls t JOIN messages m ON m.id = t.message_id
    WHERE t.loop_id = $1 AND t.response_message_id IS NULL AND m.superseded_at IS NOT NULL
    ORDER BY t.id
    FOR NO KEY UPDATE OF t
), r AS (
    INSERT INTO messages (loop_id, role, content, tool_call_id, superseded_at)
    SELECT $1, 'tool', 'cancelled: superseded by regenerate', id, now() FROM c ORDER BY id
    ON CONFLICT (tool_call_id) WHERE role = 'tool' DO NOTHING
    RETURNING id, tool_call_id
), u AS (
    UPDATE tool_calls t
    SET status = 'cancelled', response_message_id = r.id,
        result = coalesce(t.result, 'cancelled: superseded by regenerate'),
        is_success = coalesce(t.is_success, false),
        lease_token = NULL, leased_until = NULL, lease_worker_id = NULL,
        approval_status = CASE WHEN t.approval_status = 'pending' THEN 'denied'
                               ELSE t.approval_status END,
        decided_by = CASE WHEN t.approval_status = 'pending' THEN 'agentd' ELSE t.decided_by END,
        decision_reason = CASE WHEN t.approval_status = 'pending' THEN 'superseded by regenerate'
                               ELSE t.decision_reason END,
        decided_at = CASE WHEN t.approval_status = 'pending' THEN now() ELSE t.decided_at END,
        updated_at = now()
    FROM r WHERE t.id = r.tool_call_id
    RETURNING t.id
)
SELECT count(*)::bigint FROM u;

-- name: tool_call_park_input :one
-- ToolExecution: a 2026-07-28 server answered tools/call with an InputRequiredResult. Store
-- the request, drop the lease (nothing to reap) and wait for a person; the previous
-- round's answer is spent. Fence: this lease, no result yet.
-- $1 id bigint · $2 lease_token uuid · $3 input_request jsonb
UPDATE tool_calls
SET status = 'waiting', input_status = 'pending', input_request = $3, input_response = NULL,
    input_rounds = input_rounds + 1, lease_token = NULL, leased_until = NULL,
    lease_worker_id = NULL, updated_at = now()
WHERE id = $1 AND lease_token = $2 AND executed_at IS NULL AND response_message_id IS NULL
RETURNING *;

-- name: tool_call_answer_input :one
-- Lifecycle.answer_input under the loop lock; only a pending request can be answered.
-- $1 id bigint · $2 input_response jsonb · $3 answered_by text
UPDATE tool_calls
SET input_status = 'answered', input_response = $2, input_answered_at = now(),
    input_answered_by = $3, status = 'pending', updated_at = now()
WHERE id = $1 AND input_status = 'pending' AND response_message_id IS NULL
RETURNING *;

-- name: tool_call_list_pending_input :many
-- API inputs list; no fence.
-- $1 loop_id uuid
SELECT * FROM tool_calls
WHERE loop_id = $1 AND input_status = 'pending' AND response_message_id IS NULL ORDER BY id;

-- name: tool_call_schedule_task_poll :one
-- ToolExecution: the call runs as an MCP task. Record the task, drop the lease and enqueue
-- the next poll for later in the same statement: no worker waits on the task. Fence: this
-- lease, no result yet.
-- $1 id bigint · $2 lease_token uuid · $3 task_id text · $4 task_state jsonb · $5 generation uuid · $6 delay_seconds float
WITH u AS (
    UPDATE tool_calls
    SET status = 'waiting', task_id = $3, task_state = $4, lease_token = NULL,
        leased_until = NULL, lease_worker_id = NULL, updated_at = now()
    WHERE id = $1 AND lease_token = $2 AND executed_at IS NULL AND response_message_id IS NULL
    RETURNING *
), j AS (
    INSERT INTO jobs (queue, kind, loop_id, tool_call_id, generation, run_at)
    SELECT 'tool', 'tool_call', loop_id, id, $5, now() + make_interval(secs => $6) FROM u
)
SELECT * FROM u;

-- name: tool_call_approve_edited :one
-- Lifecycle.decide under the loop lock: approve a pending call with a person's arguments.
-- They become `arguments` (what runs and what the model sees as its call); the model's own
-- are kept in requested_arguments (invalid JSON it sent: its raw text, as a JSON string).
-- $1 id bigint · $2 decided_by text · $3 reason text · $4 arguments jsonb
UPDATE tool_calls
SET approval_status = 'approved', decided_at = now(), decided_by = $2, decision_reason = $3,
    requested_arguments = coalesce(arguments, to_jsonb(arguments_raw)),
    approved_arguments = $4, arguments = $4, status = 'pending', updated_at = now()
WHERE id = $1 AND approval_status = 'pending'
RETURNING *;

-- name: tool_call_interrupt_unresolved :many
-- Lifecycle.send (mode interrupt) under the loop lock, with the token rotated in the same
-- transaction: every unanswered call of the loop gets its result now, so the next turn's
-- prompt answers every call the model made. A call that ran (its result checkpointed) keeps
-- its result; any other is `cancelled`, answered "interrupted"; a pending approval or
-- input request is denied by agentd. Leases are dropped: a running tool's finish then
-- matches nothing (its worker was told to cancel it).
-- $1 loop_id uuid · $2 text text (the result of a call that did not run)
WITH c AS (
    SELECT t.id, t.executed_at, t.result FROM tool_calls t
    WHERE t.loop_id = $1 AND t.response_message_id IS NULL
    ORDER BY t.message_id, t.position
    FOR NO KEY UPDATE OF t
), r AS (
    INSERT INTO messages (loop_id, role, content, tool_call_id, metadata)
    SELECT $1, 'tool', CASE WHEN c.executed_at IS NULL THEN $2 ELSE coalesce(c.result, '') END,
           c.id, jsonb_build_object('interrupted', c.executed_at IS NULL)
    FROM c ORDER BY c.id
    ON CONFLICT (tool_call_id) WHERE role = 'tool' DO NOTHING
    RETURNING id, tool_call_id
), u AS (
    UPDATE tool_calls t
    SET status = CASE WHEN t.executed_at IS NULL THEN 'cancelled' ELSE t.status END,
        response_message_id = r.id,
        result = CASE WHEN t.executed_at IS NULL THEN $2 ELSE t.result END,
        is_success = CASE WHEN t.executed_at IS NULL THEN false ELSE t.is_success END,
        lease_token = NULL, leased_until = NULL, lease_worker_id = NULL,
        approval_status = CASE WHEN t.approval_status = 'pending' THEN 'denied'
                               ELSE t.approval_status END,
        decided_by = CASE WHEN t.approval_status = 'pending' THEN 'agentd' ELSE t.decided_by END,
        decision_reason = CASE WHEN t.approval_status = 'pending'
                               THEN 'interrupted by a new message' ELSE t.decision_reason END,
        decided_at = CASE WHEN t.approval_status = 'pending' THEN now() ELSE t.decided_at END,
        updated_at = now()
    FROM r WHERE t.id = r.tool_call_id
    RETURNING t.*
)
SELECT * FROM u ORDER BY id;

-- name: tool_call_link_child :one
-- engine/children.py: the call started a child loop (in this transaction); with `park`,
-- its lease is dropped and it waits for the child (no worker held), giving back the claim's
-- attempt as ApprovalGate's park does. Fence: this lease, no result yet.
-- $1 id bigint · $2 lease_token uuid · $3 child_loop_id uuid · $4 park bool
UPDATE tool_calls
SET child_loop_id = $3,
    metadata = CASE WHEN $4 THEN metadata ELSE metadata || '{"detached": true}' END,
    status = CASE WHEN $4 THEN 'waiting' ELSE status END,
    lease_token = CASE WHEN $4 THEN NULL ELSE lease_token END,
    leased_until = CASE WHEN $4 THEN NULL ELSE leased_until END,
    lease_worker_id = CASE WHEN $4 THEN NULL ELSE lease_worker_id END,
    attempts = CASE WHEN $4 THEN greatest(attempts - 1, 0) ELSE attempts END,
    updated_at = now()
WHERE id = $1 AND lease_token = $2 AND executed_at IS NULL AND response_message_id IS NULL
RETURNING *;

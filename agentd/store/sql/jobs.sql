-- name: job_enqueue :val
-- Whoever advances loop state, in the same transaction; no fence (the claim checks).
-- $1 queue text · $2 kind text · $3 loop_id uuid · $4 tool_call_id bigint|null · $5 generation uuid · $6 lease_seconds float · $7 delay_seconds float
INSERT INTO jobs (queue, kind, loop_id, tool_call_id, generation, lease_seconds, run_at)
VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))
RETURNING id;

-- name: job_notify :exec
-- Enqueuers outside the worker's hot path (API start/resume, reaper); wakes listeners at commit.
-- $1 queue text
SELECT pg_notify('agentd_jobs', $1);

-- name: job_claim_llm :one
-- Worker; claims the next LLM job and the loop's turn in one statement: the loop must be
-- queued, unfrozen, and still on the job's generation, else the stale job is just dropped.
-- A loop with a concurrency key that holds no slot yet needs one: jobs of saturated keys
-- are skipped (snapshot view, so other keys are never blocked behind them), and the slot
-- is taken by an upsert that re-checks the key's counter on its newest version under the
-- key's row lock; if a racing claim took the last slot, the job stays (job_taken false).
-- Lock order: the job is taken SKIP LOCKED (nobody ever waits for a job row, see
-- job_delete_for_loop), then the loop, then the key, as every statement that releases a
-- slot (loop -> key); docs/security.md.
-- $1 execution_token uuid (fresh) · $2 worker_id uuid · $3 default_lease_seconds float
WITH c AS (
    SELECT jb.id, jb.loop_id, jb.generation, jb.lease_seconds FROM jobs jb
    WHERE jb.queue = 'llm' AND jb.run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM loops kl JOIN concurrency_keys ck ON ck.key = kl.concurrency_key
                      WHERE kl.id = jb.loop_id AND NOT kl.concurrency_held
                        AND ck.running >= kl.concurrency_limit)
    ORDER BY jb.run_at, jb.id LIMIT 1 FOR UPDATE OF jb SKIP LOCKED
), cand AS (
    SELECT lo.id, lo.concurrency_key, lo.concurrency_limit, lo.concurrency_held
    FROM loops lo JOIN c ON lo.id = c.loop_id
    WHERE lo.status = 'queued' AND NOT lo.frozen
      AND lo.execution_token IS NOT DISTINCT FROM c.generation
    FOR NO KEY UPDATE OF lo
), k AS (
    INSERT INTO concurrency_keys AS ck (key, running)
    SELECT concurrency_key, 1 FROM cand
    WHERE concurrency_key IS NOT NULL AND concurrency_limit IS NOT NULL AND NOT concurrency_held
    ON CONFLICT (key) DO UPDATE SET running = ck.running + 1, updated_at = now()
    WHERE ck.running < (SELECT concurrency_limit FROM cand)
    RETURNING ck.key
), j AS (
    DELETE FROM jobs WHERE id = (SELECT id FROM c)
      AND (NOT EXISTS (SELECT 1 FROM cand)
           OR EXISTS (SELECT 1 FROM cand WHERE concurrency_key IS NULL
                                             OR concurrency_limit IS NULL OR concurrency_held)
           OR EXISTS (SELECT 1 FROM k))
    RETURNING id, loop_id, generation, lease_seconds
), l AS (
    UPDATE loops SET status = 'running', execution_token = $1, worker_id = $2,
        lease_seconds = coalesce(j.lease_seconds, loops.lease_seconds, $3),
        lease_expires_at = now() + make_interval(secs => coalesce(j.lease_seconds,
                                                                   loops.lease_seconds, $3)),
        turn_started_at = now(), status_reason = 'claimed', updated_at = now(),
        concurrency_held = loops.concurrency_key IS NOT NULL AND loops.concurrency_limit IS NOT NULL
    FROM j
    WHERE loops.id = j.loop_id AND loops.status = 'queued' AND NOT loops.frozen
      AND loops.execution_token IS NOT DISTINCT FROM j.generation
    RETURNING loops.*
)
SELECT c.id AS job_id, c.loop_id AS job_loop_id, (j.id IS NOT NULL) AS job_taken, l.*,
       pf.history AS prefetch_messages, pf.history_calls AS prefetch_tool_calls,
       pf.tools AS prefetch_mcp_tools, pf.sessions AS prefetch_mcp_sessions,
       pf.backoffs AS prefetch_backoffs
FROM c LEFT JOIN j ON true LEFT JOIN l ON true
-- The turn's context, prefetched so a steady-state turn reads nothing else (snapshot of
-- this statement; the job's enqueuer committed everything the turn reads): see
-- agentd_turn_prefetch (functions/turn_prefetch.sql), which a chained turn's prefetch shares.
LEFT JOIN LATERAL agentd_turn_prefetch(l.id) pf ON l.id IS NOT NULL;

-- name: job_claim_tool :one
-- Worker; claims the next tool job and the call's lease in one statement. Fence: the loop
-- is running/waiting on the job's generation, the call is unresolved and not leased by a
-- live holder, and (sequential calls) every earlier call of its turn is resolved.
-- $1 lease_token uuid · $2 worker_id uuid · $3 default_lease_seconds float
WITH j AS (
    DELETE FROM jobs WHERE id = (
        SELECT id FROM jobs WHERE queue = 'tool' AND run_at <= now()
        ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING id, tool_call_id, loop_id, generation, lease_seconds
), t AS (
    UPDATE tool_calls AS tc
    SET lease_token = $1, lease_worker_id = $2,
        leased_until = now() + make_interval(secs => coalesce(j.lease_seconds, $3)),
        status = CASE WHEN tc.executed_at IS NULL THEN 'running' ELSE tc.status END,
        attempts = tc.attempts + 1, updated_at = now()
    FROM j, loops AS l
    WHERE tc.id = j.tool_call_id AND l.id = tc.loop_id
      AND l.status IN ('running', 'waiting') AND NOT l.frozen
      AND l.execution_token = j.generation
      AND tc.response_message_id IS NULL
      AND (tc.leased_until IS NULL OR tc.leased_until < now())
      AND (NOT coalesce((tc.metadata ->> 'sequential')::boolean, false)
           OR NOT EXISTS (SELECT 1 FROM tool_calls p
                          WHERE p.message_id = tc.message_id AND p.position < tc.position
                            AND p.response_message_id IS NULL))
    RETURNING tc.*, l.agent AS loop_agent, to_json(l) AS prefetch_loop
)
-- The loop row and the MCP tool the call names (+ its session's fields), so the tool
-- pipeline's AgentInitialization reads nothing else.
SELECT j.id AS job_id, j.generation AS job_generation, t.*,
       (SELECT to_jsonb(mt) || jsonb_build_object(
                   'mcp_name', ms.mcp_name, 'session_id', ms.session_id,
                   'transport_kind', ms.transport_kind,
                   'task_support', ms.metadata -> 'taskTools' ->> mt.remote_name)
        FROM mcp_tools mt JOIN mcp_sessions ms ON ms.id = mt.mcp_session_id
        WHERE mt.loop_id = t.loop_id AND mt.name = t.name ORDER BY mt.id LIMIT 1)
       AS prefetch_mcp_tool
FROM j LEFT JOIN t ON true;

-- name: job_depth :many
-- Metrics, readiness and the dashboard; no fence.
SELECT queue, count(*)::bigint AS depth,
       coalesce(extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now())), 0)::float8
           AS oldest_age
FROM jobs GROUP BY queue;

-- name: job_list_for_loop :many
-- Tests and the admin UI; no fence.
-- $1 loop_id uuid
SELECT * FROM jobs WHERE loop_id = $1 ORDER BY id;

-- name: job_delete_for_loop :exec
-- Pause/stop under the loop lock: drop pending jobs (they would be stale anyway). A job a
-- claim holds is skipped, not waited for (the claim holds it waiting for this loop: a
-- deadlock); that claim then finds the loop moved on and drops the job itself.
-- $1 loop_id uuid
DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE loop_id = $1 FOR UPDATE SKIP LOCKED);

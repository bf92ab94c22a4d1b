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
-- $1 execution_token uuid (fresh) · $2 worker_id uuid · $3 default_lease_seconds float
WITH j AS (
    DELETE FROM jobs WHERE id = (
        SELECT id FROM jobs WHERE queue = 'llm' AND run_at <= now()
        ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING id, loop_id, generation, lease_seconds
), l AS (
    UPDATE loops SET status = 'running', execution_token = $1, worker_id = $2,
        lease_seconds = coalesce(j.lease_seconds, loops.lease_seconds, $3),
        lease_expires_at = now() + make_interval(secs => coalesce(j.lease_seconds,
                                                                   loops.lease_seconds, $3)),
        turn_started_at = now(), status_reason = 'claimed', updated_at = now()
    FROM j
    WHERE loops.id = j.loop_id AND loops.status = 'queued' AND NOT loops.frozen
      AND loops.execution_token IS NOT DISTINCT FROM j.generation
    RETURNING loops.*
)
SELECT j.id AS job_id, j.loop_id AS job_loop_id, l.* FROM j LEFT JOIN l ON true;

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
    RETURNING tc.*, l.agent AS loop_agent
)
SELECT j.id AS job_id, j.generation AS job_generation, t.* FROM j LEFT JOIN t ON true;

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
-- Pause/stop: drop pending jobs (they would be stale anyway).
-- $1 loop_id uuid
DELETE FROM jobs WHERE loop_id = $1;

-- name: job_enqueue :val
-- Whoever advances loop state, in the same transaction; no fence (the claim checks).
-- first_turn: a loop's first turn (lifecycle start), served after work already in flight.
-- $1 queue text · $2 kind text · $3 loop_id uuid · $4 tool_call_id bigint|null · $5 generation uuid · $6 lease_seconds float · $7 delay_seconds float · $8 first_turn boolean
INSERT INTO jobs (queue, kind, loop_id, tool_call_id, generation, lease_seconds, run_at, first_turn)
VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7), $8)
RETURNING id;

-- name: job_notify :exec
-- Enqueuers outside the worker's hot path (API start/resume, reaper); wakes listeners at commit.
-- $1 queue text
SELECT pg_notify('agentd_jobs', $1);

-- name: job_claim_llm :many
-- Worker; claims up to $5 LLM jobs and their loops' turns in one call, each fenced as a
-- single claim (agentd_claim_llm, functions/claims.sql): a stale job is dropped (row with no
-- loop), a job whose concurrency key a racing claim filled stays (job_taken false).
-- Continuations are served before first turns (jobs.first_turn, 0033).
-- $1 execution_tokens uuid[] (fresh, one per job) · $2 worker_id uuid · $3 default_lease_seconds float
-- $4 agent_versions text[] (the versions this process can run; null: any) · $5 limit int
SELECT * FROM agentd_claim_llm($1::uuid[], $2::uuid, $3::float8, $4::text[], $5::int);

-- name: job_claim_tool :many
-- Worker; claims up to $5 tool jobs and their calls' leases in one statement. Fence: the
-- loop is running/waiting on the job's generation, the call is unresolved and not leased by
-- a live holder, and (sequential calls) every earlier call of its turn is resolved. A job
-- that fails it is dropped (row with no call); of two jobs for one call, one leases it
-- (one on the loop's generation, if either is).
-- Lock order: the jobs SKIP LOCKED, then the calls in id order (docs/security.md).
-- Agent versions (0025): a call of a loop whose version is not one of $4 is left for a
-- worker that has it (the call runs on the version its turn ran on).
-- $1 lease_tokens uuid[] (fresh, one per job) · $2 worker_id uuid · $3 default_lease_seconds float
-- $4 agent_versions text[] (the versions this process can run; null: any) · $5 limit int
WITH j AS (
    DELETE FROM jobs WHERE id IN (
        SELECT id FROM jobs WHERE queue = 'tool' AND run_at <= now()
          AND ($4::text[] IS NULL
               OR NOT EXISTS (SELECT 1 FROM loops vl WHERE vl.id = jobs.loop_id
                                AND vl.status IN ('running', 'waiting')
                                AND coalesce(vl.agent_version, '') <> ALL ($4::text[])))
        ORDER BY first_turn, run_at, id LIMIT least($5::int, cardinality($1::uuid[]))
        FOR UPDATE SKIP LOCKED)
    RETURNING id, tool_call_id, loop_id, generation, lease_seconds
), n AS (
    -- one job per call, numbered for its lease token: one on the loop's generation if any
    -- (a stale twin must not take the fresh job down with it), else the lowest id
    SELECT DISTINCT ON (j.tool_call_id) j.id, j.tool_call_id, j.generation, j.lease_seconds,
           row_number() OVER (ORDER BY j.tool_call_id, j.id) AS rn
    FROM j LEFT JOIN loops gl ON gl.id = j.loop_id
    WHERE j.tool_call_id IS NOT NULL
    ORDER BY j.tool_call_id, (gl.execution_token IS NOT DISTINCT FROM j.generation) DESC, j.id
), lk AS (
    SELECT tc.id FROM tool_calls tc WHERE tc.id IN (SELECT tool_call_id FROM n)
    ORDER BY tc.id FOR NO KEY UPDATE OF tc
), t AS (
    UPDATE tool_calls AS tc
    SET lease_token = ($1::uuid[])[n.rn], lease_worker_id = $2,
        leased_until = now() + make_interval(secs => coalesce(n.lease_seconds, $3)),
        status = CASE WHEN tc.executed_at IS NULL THEN 'running' ELSE tc.status END,
        attempts = tc.attempts + 1, updated_at = now()
    FROM n, loops AS l
    WHERE tc.id = n.tool_call_id AND tc.id IN (SELECT id FROM lk) AND l.id = tc.loop_id
      AND l.status IN ('running', 'waiting') AND NOT l.frozen
      AND l.execution_token = n.generation
      AND tc.response_message_id IS NULL
      AND (tc.leased_until IS NULL OR tc.leased_until < now())
      AND (NOT coalesce((tc.metadata ->> 'sequential')::boolean, false)
           OR NOT EXISTS (SELECT 1 FROM tool_calls p
                          WHERE p.message_id = tc.message_id AND p.position < tc.position
                            AND p.response_message_id IS NULL))
    RETURNING tc.*, n.id AS taken_by_job, l.agent AS loop_agent, to_json(l) AS prefetch_loop
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
FROM j LEFT JOIN t ON t.taken_by_job = j.id
ORDER BY j.id;

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
-- Pause/stop under the loop lock: drop pending jobs (they would be stale anyway); unfreeze,
-- to enqueue the loop's work again on its generation (engine/freezing.py). A job a
-- claim holds is skipped, not waited for (the claim holds it waiting for this loop: a
-- deadlock); that claim then finds the loop moved on and drops the job itself.
-- $1 loop_id uuid
DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE loop_id = $1 FOR UPDATE SKIP LOCKED);

-- A batch of LLM turn claims in one call (job_claim_llm): up to p_limit jobs, each claimed
-- by the statement one claim ran before batches, so the fences are the same: the loop must
-- be queued, unfrozen and still on the job's generation (else the stale job is dropped),
-- and a loop whose concurrency key holds no slot yet takes one by an upsert that re-checks
-- the key's counter on its newest version under the key's row lock (a racing claim, or an
-- earlier claim of this batch, took the last slot: the job stays, job_taken false).
-- Order of service: continuations (a loop's 2nd+ turn) before first turns, then run_at, id.
-- Lock order (docs/security.md): the jobs SKIP LOCKED, then all their loops in id order,
-- then the keys in key order (a key's jobs in claim order, so its waiting loops run first
-- started first); a loop not locked here (not queued when read) is not claimed
-- later in the batch (its job is stale, dropped), so no loop is waited for while a key is held.
-- First started, first run: once a key refuses a job (no free slot for that loop's limit),
-- the key is held for the rest of the batch, so no later job of the key is taken ahead of
-- the refused one (a loop with a higher limit, or a slot freed by a concurrent commit
-- between two of the batch's statements); the held key's jobs stay, job_taken false.
-- Agent versions (0025): a job of a queued loop whose version (or the upgrade asked for)
-- is not one of p_versions is left for a worker that has it; a stale job is anyone's to drop.
-- Each row carries the claimed loop (json) and the turn's context (agentd_turn_prefetch),
-- read by the statement that claimed it: the job's enqueuer committed all of it.

CREATE OR REPLACE FUNCTION agentd_claim_llm(p_tokens uuid[], p_worker uuid, p_default_lease double precision, p_versions text[], p_limit integer) RETURNS TABLE(job_id bigint, job_loop_id uuid, job_taken boolean, claimed_loop json, prefetch_messages json, prefetch_tool_calls json, prefetch_mcp_tools jsonb, prefetch_mcp_sessions jsonb, prefetch_backoffs jsonb)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    v_jobs bigint[];
    v_locked uuid[];
    v_job record;
    v_i integer := 0;
    v_held text[] := '{}';
BEGIN
    SELECT array_agg(s.id) INTO v_jobs FROM (
        SELECT jb.id FROM jobs jb
        WHERE jb.queue = 'llm' AND jb.run_at <= now()
          AND NOT EXISTS (SELECT 1 FROM loops kl JOIN concurrency_keys ck ON ck.key = kl.concurrency_key
                          WHERE kl.id = jb.loop_id AND NOT kl.concurrency_held
                            AND ck.running >= kl.concurrency_limit)
          AND (p_versions IS NULL
               OR NOT EXISTS (SELECT 1 FROM loops vl WHERE vl.id = jb.loop_id AND vl.status = 'queued'
                                AND coalesce(vl.upgrade_to, vl.agent_version, '') <> ALL (p_versions)))
        ORDER BY jb.first_turn, jb.run_at, jb.id
        LIMIT least(p_limit, cardinality(p_tokens))
        FOR UPDATE OF jb SKIP LOCKED
    ) s;
    IF v_jobs IS NULL THEN
        RETURN;
    END IF;
    SELECT array_agg(s.id) INTO v_locked FROM (
        SELECT lo.id FROM loops lo
        WHERE lo.id IN (SELECT jb.loop_id FROM jobs jb WHERE jb.id = ANY (v_jobs))
          AND lo.status = 'queued' AND NOT lo.frozen
        ORDER BY lo.id
        FOR NO KEY UPDATE OF lo
    ) s;
    FOR v_job IN
        SELECT jb.id, jb.loop_id, jb.generation, jb.lease_seconds,
               -- the key this job's loop needs a slot of (NULL: none, or holds one already)
               CASE WHEN lo.concurrency_limit IS NOT NULL AND NOT lo.concurrency_held
                    THEN lo.concurrency_key END AS needs_key
        FROM jobs jb LEFT JOIN loops lo ON lo.id = jb.loop_id AND lo.id = ANY (v_locked)
        WHERE jb.id = ANY (v_jobs)
        ORDER BY lo.concurrency_key NULLS FIRST, jb.first_turn, jb.run_at, jb.id
    LOOP
        v_i := v_i + 1;
        IF v_job.needs_key = ANY (v_held) THEN
            -- its key refused an older job of this batch: this one waits its turn (stays)
            RETURN QUERY SELECT v_job.id, v_job.loop_id, false, NULL::json, NULL::json,
                                NULL::json, NULL::jsonb, NULL::jsonb, NULL::jsonb;
            CONTINUE;
        END IF;
        RETURN QUERY
        WITH c AS (
            SELECT v_job.id AS id, v_job.loop_id AS loop_id, v_job.generation AS generation,
                   v_job.lease_seconds AS lease_seconds
        ), cand AS (
            SELECT lo.id, lo.concurrency_key, lo.concurrency_limit, lo.concurrency_held
            FROM loops lo JOIN c ON lo.id = c.loop_id
            WHERE lo.id = ANY (v_locked) AND lo.status = 'queued' AND NOT lo.frozen
              AND lo.execution_token IS NOT DISTINCT FROM c.generation
        ), k AS (
            INSERT INTO concurrency_keys AS ck (key, running)
            SELECT concurrency_key, 1 FROM cand
            WHERE concurrency_key IS NOT NULL AND concurrency_limit IS NOT NULL
              AND NOT concurrency_held
            ON CONFLICT (key) DO UPDATE SET running = ck.running + 1, updated_at = now()
            WHERE ck.running < (SELECT concurrency_limit FROM cand)
            RETURNING ck.key
        ), j AS (
            DELETE FROM jobs WHERE id = (SELECT id FROM c)
              AND (NOT EXISTS (SELECT 1 FROM cand)
                   OR EXISTS (SELECT 1 FROM cand WHERE concurrency_key IS NULL
                                                     OR concurrency_limit IS NULL
                                                     OR concurrency_held)
                   OR EXISTS (SELECT 1 FROM k))
            RETURNING id, loop_id, generation, lease_seconds
        ), l AS (
            UPDATE loops SET status = 'running', execution_token = p_tokens[v_i],
                worker_id = p_worker,
                lease_seconds = coalesce(j.lease_seconds, loops.lease_seconds, p_default_lease),
                lease_expires_at = now() + make_interval(secs => coalesce(
                    j.lease_seconds, loops.lease_seconds, p_default_lease)),
                turn_started_at = now(), status_reason = 'claimed', updated_at = now(),
                concurrency_held = loops.concurrency_key IS NOT NULL
                                   AND loops.concurrency_limit IS NOT NULL
            FROM j
            WHERE loops.id = j.loop_id AND loops.status = 'queued' AND NOT loops.frozen
              AND loops.execution_token IS NOT DISTINCT FROM j.generation
            RETURNING loops.*
        )
        SELECT c.id, c.loop_id, (j.id IS NOT NULL),
               CASE WHEN l.id IS NULL THEN NULL ELSE to_json(l) END,
               pf.history, pf.history_calls, pf.tools, pf.sessions, pf.backoffs
        FROM c LEFT JOIN j ON true LEFT JOIN l ON true
        LEFT JOIN LATERAL agentd_turn_prefetch(l.id) pf ON l.id IS NOT NULL;
        -- Still there: its key had no slot for it (taken and stale jobs are deleted).
        IF v_job.needs_key IS NOT NULL AND EXISTS (SELECT 1 FROM jobs WHERE id = v_job.id) THEN
            v_held := v_held || v_job.needs_key;
        END IF;
    END LOOP;
END
$$;

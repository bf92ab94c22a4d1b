-- name: loop_insert :one
-- API/lifecycle start; no fence (new row).
-- $1 agent text · $2 subject text · $3 state jsonb · $4 execution_token uuid · $5 title text · $6 observed bool · $7 agent_version text|null
INSERT INTO loops (agent, subject, state, status, execution_token, title, observed,
                   agent_version)
VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7)
RETURNING *;

-- name: loop_insert_with_id :one
-- Lifecycle start of an AG-UI thread (its threadId is the loop id); no fence (new row).
-- No row back: a loop with that id exists (a concurrent start of the same thread).
-- $1 agent text · $2 subject text · $3 state jsonb · $4 execution_token uuid · $5 title text · $6 observed bool · $7 id uuid · $8 agent_version text|null
INSERT INTO loops (id, agent, subject, state, status, execution_token, title, observed,
                   agent_version)
VALUES ($7, $1, $2, $3, 'queued', $4, $5, $6, $8)
ON CONFLICT (id) DO NOTHING
RETURNING *;

-- name: loop_get :one
-- Readers (API, engine); no fence.
-- $1 id uuid
SELECT * FROM loops WHERE id = $1;

-- name: loop_get_for_update :one
-- Lifecycle transitions; takes the row lock every fence re-checks under.
-- $1 id uuid
SELECT * FROM loops WHERE id = $1 FOR NO KEY UPDATE;

-- name: loop_list :many
-- API list, newest first, keyset cursor (created_at, id).
-- $1 status text|null · $2 agent text|null · $3 cursor_created_at timestamptz|null · $4 cursor_id uuid|null · $5 limit int · $6 parent_id uuid|null
SELECT * FROM loops
WHERE ($1::text IS NULL OR status = $1)
  AND ($2::text IS NULL OR agent = $2)
  AND ($6::uuid IS NULL OR parent_id = $6)
  AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4))
ORDER BY created_at DESC, id DESC
LIMIT $5;

-- name: loop_set_status :one
-- Lifecycle (pause/stop/resume/freeze...) under the row lock taken by loop_get_for_update.
-- $1 id uuid · $2 status text · $3 execution_token uuid|null · $4 status_reason text|null · $5 error_message text|null
UPDATE loops
SET status = $2, execution_token = $3, status_reason = $4, error_message = $5,
    lease_expires_at = NULL, worker_id = NULL, updated_at = now()
WHERE id = $1
RETURNING *;

-- name: loop_set_flags :one
-- Admin freeze/unfreeze/observe; no fence.
-- $1 id uuid · $2 frozen bool|null · $3 observed bool|null
UPDATE loops
SET frozen = coalesce($2, frozen), observed = coalesce($3, observed), updated_at = now()
WHERE id = $1
RETURNING *;

-- name: loop_merge_state :one
-- Lifecycle.resume under the loop lock: the loop's own limits (`max_steps`,
-- `max_tokens_total`) merged into its state; no fence (the lock is the caller's).
-- $1 id uuid · $2 patch jsonb
UPDATE loops SET state = state || $2::jsonb, updated_at = now()
WHERE id = $1
RETURNING *;

-- name: loop_finalize_turn_all :one
-- ResponseParsing: the whole finalize of an LLM turn in ONE statement, from ONE jsonb
-- document ($1) whose fields are declared, with their types, in `f` below (the calls and
-- events it carries, in `tc` and `ev`). Fence: status running AND execution_token (every
-- write below reads from the fenced UPDATE, so zero rows returned = nothing written).
-- Promotes the streaming shell (or inserts the assistant message), inserts the tool calls,
-- their jobs (all, or only position 0 when sequential), the turn's events (`attach` ones
-- get the message id and the {step, tool_calls} log), and notifies observers of an
-- observed loop (and the tool queue when notify_tool) at commit.
-- Chaining: the first cardinality(own_tokens) calls (positions 0..n-1) are inserted already
-- leased to worker_id, one lease token each, and get no job: the finalizing worker runs
-- them itself (the state a claim would leave); returned as leased_calls. A frozen loop's
-- calls are all queued, as the claim would not take them.
-- Cost and speed: cost (null: no price) is added to the loop's cost, or counted in
-- cost_unpriced_turns; the message carries its own figures in metadata.usage.
-- Discovery (mcp_sessions/mcp_tools set: a turn over shared MCP sessions left its
-- discovery to this statement): written by agentd_mcp_discovery_write, as
-- mcp_discovery_record writes them, after the loop's lock, so a tool call of this turn
-- claimed by another worker finds its tool.
-- Steering (0027): a turn that would complete the loop while steering messages are
-- pending (loops.steer_pending, read on the updated row) leaves it queued instead, with
-- steer_release set and an LLM job on the same generation (`sj`): that turn applies them.
-- A key missing from the document reads as null, like a JSON null.
-- $1 finalize jsonb (built by store/loops.py finalize_turn_all)
WITH f AS (
    SELECT * FROM jsonb_to_record($1::jsonb) AS f(
        loop_id uuid, execution_token uuid,
        completed bool,               -- no tool calls: the loop completes
        tokens_prompt int, tokens_completion int, tokens_cached int,
        tokens_estimated bool,        -- a chars/4 estimate, not the provider's usage
        tokens_reasoning int,
        cost numeric,                 -- null: no price (sent as a string: exact)
        generation_seconds float8,    -- null: not counted in the loop's tps
        shell_id bigint,              -- the streaming shell to promote, or null: insert
        content text, reasoning text, metadata jsonb, ttft float8, duration float8,
        finish_reason text,
        calls jsonb,                  -- array, one object per call: see `tc`
        sequential bool, tool_lease_seconds float8, notify_tool bool,
        own_tokens uuid[],            -- lease tokens of the calls this worker runs itself
        worker_id uuid,
        events jsonb,                 -- array, one object per event: see `ev`
        mcp_sessions jsonb,           -- array or null: {mcp_name, session_id, transport_kind,
                                      --                 metadata}
        mcp_tools jsonb               -- array or null: {server, name, remote_name,
                                      --   description, input_schema, requires_approval}
    )
), l AS (
    UPDATE loops
    SET step_count = loops.step_count + 1,
        -- A run that ends with steering messages pending goes on with them (0027): read
        -- on the row this updates, so a send that committed first is always seen.
        status = CASE WHEN NOT f.completed THEN 'running'
                      WHEN loops.steer_pending > 0 THEN 'queued' ELSE 'completed' END,
        status_reason = CASE WHEN NOT f.completed THEN 'tool_calls'
                             WHEN loops.steer_pending > 0 THEN 'steered'
                             ELSE 'model_finished' END,
        execution_token = CASE WHEN f.completed AND loops.steer_pending = 0 THEN NULL
                               ELSE loops.execution_token END,
        steer_release = loops.steer_release OR (f.completed AND loops.steer_pending > 0),
        lease_expires_at = NULL, worker_id = NULL, error_message = NULL,
        tokens_prompt = loops.tokens_prompt + f.tokens_prompt,
        tokens_completion = loops.tokens_completion + f.tokens_completion,
        tokens_cached = loops.tokens_cached + f.tokens_cached,
        tokens_estimated = loops.tokens_estimated OR coalesce(f.tokens_estimated, false),
        cost = CASE WHEN f.cost IS NULL THEN loops.cost
                    ELSE coalesce(loops.cost, 0) + f.cost END,
        cost_unpriced_turns = loops.cost_unpriced_turns
                              + CASE WHEN f.cost IS NULL THEN 1 ELSE 0 END,
        tokens_reasoning = loops.tokens_reasoning + coalesce(f.tokens_reasoning, 0),
        ttft_total = loops.ttft_total + coalesce(f.ttft, 0),
        ttft_turns = loops.ttft_turns + CASE WHEN f.ttft IS NULL THEN 0 ELSE 1 END,
        generation_seconds = loops.generation_seconds + coalesce(f.generation_seconds, 0),
        generation_tokens = loops.generation_tokens
                            + CASE WHEN f.generation_seconds IS NULL THEN 0
                                   ELSE f.tokens_completion END,
        updated_at = now()
    FROM f
    -- the id as a scalar subquery: a primary-key lookup, whatever the planner guesses of f
    WHERE loops.id = (SELECT f.loop_id FROM f) AND loops.execution_token = f.execution_token
      AND loops.status = 'running'
    RETURNING loops.*
), p AS (
    UPDATE messages
    SET content = f.content, reasoning = f.reasoning, metadata = f.metadata,
        tokens_prompt = f.tokens_prompt, tokens_completion = f.tokens_completion,
        tokens_cached = f.tokens_cached, ttft = f.ttft, duration = f.duration,
        finish_reason = f.finish_reason, step = l.step_count,
        tokens_estimated = coalesce(f.tokens_estimated, false),
        hidden = false, status = 'completed', updated_at = now()
    FROM l, f
    WHERE messages.id = (SELECT f.shell_id FROM f) AND messages.status = 'processing'
    RETURNING messages.id
), i AS (
    INSERT INTO messages (loop_id, role, content, reasoning, step, execution_token, metadata,
                          tokens_prompt, tokens_completion, tokens_cached, ttft, duration,
                          finish_reason, tokens_estimated)
    SELECT l.id, 'assistant', f.content, f.reasoning, l.step_count, f.execution_token,
           coalesce(f.metadata, '{}'::jsonb), f.tokens_prompt, f.tokens_completion,
           f.tokens_cached, f.ttft, f.duration, f.finish_reason,
           coalesce(f.tokens_estimated, false)
    FROM l, f WHERE NOT EXISTS (SELECT 1 FROM p)
    RETURNING id
), m AS (
    SELECT id FROM p UNION ALL SELECT id FROM i
), tc AS (
    INSERT INTO tool_calls (loop_id, message_id, position, provider_call_id, name, arguments,
                            arguments_raw, metadata, status, lease_token, lease_worker_id,
                            leased_until, attempts)
    SELECT l.id, m.id, x.position, x.provider_call_id, x.name, x.arguments, x.arguments_raw,
           x.metadata,
           CASE WHEN o.own THEN 'running' ELSE 'pending' END,
           CASE WHEN o.own THEN f.own_tokens[x.position + 1] END,
           CASE WHEN o.own THEN f.worker_id END,
           CASE WHEN o.own THEN now() + make_interval(secs => f.tool_lease_seconds) END,
           CASE WHEN o.own THEN 1 ELSE 0 END
    FROM l, m, f,
         jsonb_to_recordset(f.calls) AS x(position int, provider_call_id text, name text,
                                          arguments jsonb, arguments_raw text,
                                          metadata jsonb),
         LATERAL (SELECT x.position < coalesce(cardinality(f.own_tokens), 0) AND NOT l.frozen
                         AND f.worker_id IS NOT NULL AS own) o
    RETURNING *
), jb AS (
    INSERT INTO jobs (queue, kind, loop_id, tool_call_id, generation, lease_seconds)
    SELECT 'tool', 'tool_call', f.loop_id, tc.id, f.execution_token, f.tool_lease_seconds
    FROM tc, f WHERE (NOT f.sequential OR tc.position = 0) AND tc.lease_token IS NULL
    RETURNING id
), sj AS (
    -- steered: the next turn, on the same generation, applies the pending messages
    INSERT INTO jobs (queue, kind, loop_id, generation, lease_seconds)
    SELECT 'llm', 'llm_turn', l.id, l.execution_token, l.lease_seconds
    FROM l WHERE l.status = 'queued'
    RETURNING id
), ev AS (
    INSERT INTO events (loop_id, name, reason, http_method, url, status, request_data,
                        response_data, duration, log, tool_call_id, message_id,
                        inbound_session_id)
    SELECT x.loop_id, x.name, x.reason, x.http_method, x.url, x.status, x.request_data,
           x.response_data, x.duration,
           CASE WHEN x.attach THEN jsonb_build_object(
                    'step', l.step_count, 'tool_calls', jsonb_array_length(f.calls))::text
                ELSE x.log END,
           x.tool_call_id, CASE WHEN x.attach THEN m.id ELSE x.message_id END,
           x.inbound_session_id
    FROM l, m, f,
         jsonb_to_recordset(f.events) AS x(loop_id uuid, name text, reason text,
                                           http_method text, url text, status int,
                                           request_data jsonb, response_data jsonb,
                                           duration float8, log text, tool_call_id bigint,
                                           message_id bigint, inbound_session_id bigint,
                                           attach bool)
    RETURNING 1
), dw AS (
    -- not a data-modifying CTE, so the final SELECT reads it (else it would not run)
    SELECT agentd_mcp_discovery_write(l.id, f.mcp_sessions, f.mcp_tools)
    FROM l, f WHERE f.mcp_tools IS NOT NULL
), n AS (
    SELECT pg_notify(v.chan, v.payload)
    FROM l, m, f, LATERAL (VALUES
        (1, 'agentd_stream', CASE WHEN l.observed THEN jsonb_build_object(
            'type', 'message', 'loop_id', l.id::text, 'message_id', m.id,
            'role', 'assistant')::text END),
        (2, 'agentd_stream', CASE WHEN l.observed THEN jsonb_build_object(
            'type', 'status', 'loop_id', l.id::text, 'status', l.status)::text END),
        (3, 'agentd_jobs', CASE WHEN f.notify_tool AND EXISTS (SELECT 1 FROM jb)
                                THEN 'tool' END),
        (4, 'agentd_jobs', CASE WHEN EXISTS (SELECT 1 FROM sj) THEN 'llm' END)
    ) AS v(o, chan, payload)
    WHERE v.payload IS NOT NULL
)
SELECT l.*, m.id AS message_id, (SELECT count(*) FROM jb) AS jobs_enqueued,
       (SELECT count(*) FROM ev) AS events_inserted, (SELECT count(*) FROM n) AS notified,
       (SELECT coalesce(json_agg(t ORDER BY t.position), '[]'::json)
        FROM tc t WHERE t.lease_token IS NOT NULL) AS leased_calls,
       (SELECT count(*) FROM dw) AS discoveries_written
FROM l, m;

-- name: loop_fenced_transition :one
-- Engine (limits, failures, host-driven completion); fence: execution_token = $2 and status in $3.
-- $1 id uuid · $2 execution_token uuid · $3 from_statuses text[] · $4 status text · $5 status_reason text · $6 error_message text|null · $7 new_token uuid|null
UPDATE loops
SET status = $4, status_reason = $5, error_message = $6, execution_token = $7,
    lease_expires_at = NULL, worker_id = NULL, updated_at = now()
WHERE id = $1 AND execution_token = $2 AND status = ANY($3::text[])
RETURNING *;

-- name: loop_lease_renew_many :many
-- LeaseRenewer, one statement per tick; fence: status running AND execution_token matches.
-- A lease is written only once less than half of it, or less than $3 (two heartbeat
-- intervals, so the next tick is never too late), is left: a 660 s lease every ~33 ticks,
-- not every tick, so heartbeat writes stay rare and HOT. Every held lease is returned
-- with the seconds it has left. A turn that already finalized into its tool phase (lease
-- cleared) is reported kept, with no lease: the tick can land between that commit and the
-- turn unregistering.
-- $1 ids uuid[] · $2 tokens uuid[] · $3 renew_within float
WITH r AS (
    SELECT l.id, l.lease_expires_at FROM loops l
    JOIN unnest($1::uuid[], $2::uuid[]) AS x(id, token)
      ON l.id = x.id AND l.execution_token = x.token AND l.status = 'running'
), u AS (
    UPDATE loops SET lease_expires_at = now() + make_interval(secs => loops.lease_seconds)
    FROM unnest($1::uuid[], $2::uuid[]) AS x(id, token)
    WHERE loops.id = x.id AND loops.execution_token = x.token AND loops.status = 'running'
      AND loops.lease_expires_at IS NOT NULL
      AND loops.lease_expires_at
          < now() + make_interval(secs => greatest(loops.lease_seconds / 2, $3::float8))
    RETURNING loops.id, loops.lease_expires_at
)
SELECT r.id,
       extract(epoch FROM coalesce(u.lease_expires_at, r.lease_expires_at) - now())::float8
           AS remaining
FROM r LEFT JOIN u ON u.id = r.id;

-- name: loop_release_leases :exec
-- Graceful shutdown, or a turn given up while the database was away (released as soon as
-- it answers again): give this worker's unfinished turns back at once; fence: tokens match
-- and the turn still holds its lease (a finalized turn's tool phase is not a turn to redo).
-- $1 ids uuid[] · $2 tokens uuid[] · $3 status_reason text
WITH r AS (
    SELECT l.id FROM loops l
    JOIN unnest($1::uuid[], $2::uuid[]) AS x(id, token)
      ON l.id = x.id AND l.execution_token = x.token AND l.status = 'running'
         AND l.lease_expires_at IS NOT NULL
    FOR NO KEY UPDATE OF l
), u AS (
    UPDATE loops SET status = 'queued', execution_token = gen_random_uuid(),
        lease_expires_at = NULL, worker_id = NULL, status_reason = $3, updated_at = now()
    FROM r WHERE loops.id = r.id
    RETURNING loops.id, loops.execution_token, loops.lease_seconds
), s AS (
    UPDATE messages SET status = 'failed', hidden = true, updated_at = now()
    WHERE loop_id IN (SELECT id FROM u) AND status = 'processing'
)
INSERT INTO jobs (queue, kind, loop_id, generation, lease_seconds)
SELECT 'llm', 'llm_turn', id, execution_token, lease_seconds FROM u;

-- name: loop_reap_expired :many
-- Reaper case 1 and the dead-worker fast path: requeue running LLM turns whose lease
-- expired or whose worker died; rotates the token so the stale worker cannot write.
-- $1 dead_workers uuid[] · $2 limit int
WITH r AS (
    SELECT id FROM loops
    WHERE status = 'running' AND lease_expires_at IS NOT NULL
      AND (lease_expires_at < now() OR worker_id = ANY($1::uuid[]))
    ORDER BY id
    LIMIT $2
    FOR NO KEY UPDATE SKIP LOCKED
), u AS (
    UPDATE loops SET status = 'queued', execution_token = gen_random_uuid(),
        lease_expires_at = NULL, worker_id = NULL,
        status_reason = CASE WHEN loops.worker_id = ANY($1::uuid[])
                             THEN 'reaped_worker_dead' ELSE 'reaped_lease_expired' END,
        updated_at = now()
    FROM r WHERE loops.id = r.id
    RETURNING loops.id, loops.execution_token, loops.lease_seconds, loops.status_reason
), s AS (
    UPDATE messages SET status = 'failed', hidden = true, updated_at = now()
    WHERE loop_id IN (SELECT id FROM u) AND status = 'processing'
), j AS (
    INSERT INTO jobs (queue, kind, loop_id, generation, lease_seconds)
    SELECT 'llm', 'llm_turn', id, execution_token, lease_seconds FROM u
)
SELECT id, status_reason FROM u;

-- name: loop_reap_queued :many
-- Reaper case 4 and dropped enqueues: a queued, unfrozen loop with no job, or queued past
-- the threshold, gets a fresh generation and job (any older job becomes stale).
-- A loop waiting for a worker with its agent version is not stuck either (the Reaper marked
-- it; it keeps its job until such a worker claims it) while no live worker has it.
-- $1 threshold_seconds float · $2 limit int · $3 grace_seconds float
WITH r AS (
    SELECT l.id FROM loops l
    WHERE l.status = 'queued' AND NOT l.frozen
      AND ((l.updated_at < now() - make_interval(secs => $1)
            AND NOT (l.status_reason IS NOT DISTINCT FROM 'waiting_for_version'
                     AND NOT EXISTS (SELECT 1 FROM workers w
                                     JOIN worker_versions wv ON wv.worker_id = w.id
                                     WHERE NOT w.stopping AND 'llm' = ANY (w.queues)
                                       AND coalesce(l.upgrade_to, l.agent_version)
                                           = ANY (wv.agent_versions)))
            -- not stuck: a turn deferred by a provider limit (its job is not due yet), or a
            -- loop waiting for a slot of its saturated concurrency key (rotating would
            -- lose its place in line)
            AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.loop_id = l.id
                              AND j.generation = l.execution_token AND j.run_at > now())
            AND NOT EXISTS (SELECT 1 FROM concurrency_keys ck
                            WHERE ck.key = l.concurrency_key AND NOT l.concurrency_held
                              AND ck.running >= l.concurrency_limit))
           OR (l.updated_at < now() - make_interval(secs => $3)
               AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.loop_id = l.id)))
    ORDER BY l.id
    LIMIT $2
    FOR NO KEY UPDATE SKIP LOCKED
), u AS (
    UPDATE loops SET execution_token = gen_random_uuid(), updated_at = now(),
        status_reason = 'reaped_queued'
    FROM r WHERE loops.id = r.id
    RETURNING loops.id, loops.execution_token, loops.lease_seconds
), j AS (
    INSERT INTO jobs (queue, kind, loop_id, generation, lease_seconds)
    SELECT 'llm', 'llm_turn', id, execution_token, lease_seconds FROM u
)
SELECT id FROM u;

-- name: loop_reap_gate :many
-- Reaper: a running loop in its tool phase whose every tool call is resolved but no LLM
-- turn was enqueued (a dropped continuation); fires the completion gate.
-- $1 grace_seconds float · $2 limit int
WITH r AS (
    SELECT l.id FROM loops l
    WHERE l.status = 'running' AND l.lease_expires_at IS NULL AND NOT l.frozen
      AND l.updated_at < now() - make_interval(secs => $1)
      AND NOT EXISTS (SELECT 1 FROM tool_calls t
                      WHERE t.loop_id = l.id AND t.response_message_id IS NULL)
      AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.loop_id = l.id)
    ORDER BY l.id
    LIMIT $2
    FOR NO KEY UPDATE SKIP LOCKED
), u AS (
    UPDATE loops SET status = 'queued', execution_token = gen_random_uuid(),
        status_reason = 'reaped_dropped_continuation', updated_at = now()
    FROM r WHERE loops.id = r.id
    RETURNING loops.id, loops.execution_token, loops.lease_seconds
), j AS (
    INSERT INTO jobs (queue, kind, loop_id, generation, lease_seconds)
    SELECT 'llm', 'llm_turn', id, execution_token, lease_seconds FROM u
)
SELECT id FROM u;

-- name: loop_count_by_status :many
-- Dashboard and metrics; no fence.
SELECT status, agent, count(*)::bigint AS n FROM loops GROUP BY status, agent;

-- name: loop_search :many
-- Admin loops list with a text filter: subject/title ILIKE, or an id range (a hex prefix of
-- the id, padded); newest first on loops_created, keyset cursor (created_at, id); no fence.
-- $1 status text|null · $2 agent text|null · $3 pattern text (ILIKE, escaped) · $4 id_low uuid|null · $5 id_high uuid|null · $6 cursor_created_at timestamptz|null · $7 cursor_id uuid|null · $8 limit int
SELECT * FROM loops
WHERE ($1::text IS NULL OR status = $1)
  AND ($2::text IS NULL OR agent = $2)
  AND (subject ILIKE $3 OR title ILIKE $3 OR id BETWEEN $4::uuid AND $5::uuid)
  AND ($6::timestamptz IS NULL OR (created_at, id) < ($6, $7))
ORDER BY created_at DESC, id DESC
LIMIT $8;

-- name: loop_count_by_status_capped :many
-- Admin dashboard and loops list: per-status counts that stop at a cap, each an index-only
-- scan of loops_status_created, so a page load never counts every loop; no fence.
-- $1 statuses text[] · $2 cap int
SELECT s.status,
       (SELECT count(*) FROM (SELECT 1 FROM loops l WHERE l.status = s.status LIMIT $2) x)::bigint
           AS n
FROM unnest($1::text[]) AS s(status);

-- name: loop_estimate_total :val
-- Admin dashboard: the planner's row estimate for loops (-1 before the first ANALYZE); no fence.
SELECT reltuples::bigint FROM pg_class WHERE oid = 'loops'::regclass;

-- name: loop_finalize_compaction :one
-- Compaction, in the transaction that writes the summary; fence: status running AND
-- execution_token = $2. The loop goes back to queued on a new generation ($3) for the turn
-- that uses the summary; step_count is not advanced (a compaction is not a model step).
-- The summary's cost ($8, null: no price) rolls up as a turn's does.
-- $1 id uuid · $2 execution_token uuid · $3 new_token uuid · $4 tokens_prompt int · $5 tokens_completion int · $6 tokens_cached int · $7 tokens_estimated bool · $8 cost numeric|null · $9 tokens_reasoning int
UPDATE loops
SET status = 'queued', status_reason = 'compacted', execution_token = $3,
    lease_expires_at = NULL, worker_id = NULL, error_message = NULL,
    tokens_prompt = tokens_prompt + $4, tokens_completion = tokens_completion + $5,
    tokens_cached = tokens_cached + $6,
    tokens_estimated = tokens_estimated OR coalesce($7, false),
    cost = CASE WHEN $8::numeric IS NULL THEN cost ELSE coalesce(cost, 0) + $8::numeric END,
    cost_unpriced_turns = cost_unpriced_turns + CASE WHEN $8::numeric IS NULL THEN 1 ELSE 0 END,
    tokens_reasoning = tokens_reasoning + coalesce($9::int, 0),
    updated_at = now()
WHERE id = $1 AND execution_token = $2 AND status = 'running'
RETURNING *;

-- name: loop_insert_fork :one
-- Lifecycle.fork; no fence (new row, paused, no generation until resumed).
-- $1 agent text · $2 subject text · $3 state jsonb · $4 title text · $5 forked_from_loop_id uuid · $6 forked_from_message_id bigint
INSERT INTO loops (agent, subject, state, status, status_reason, title, forked_from_loop_id,
                   forked_from_message_id, agent_version)
VALUES ($1, $2, $3, 'paused', 'forked', $4, $5, $6,
        (SELECT agent_version FROM loops WHERE id = $5))  -- the source's version (0025)
RETURNING *;

-- name: loop_set_step_count :one
-- Lifecycle.fork, right after copying the history; no fence (the loop is new and paused).
-- $1 id uuid · $2 step_count int
UPDATE loops SET step_count = $2, updated_at = now() WHERE id = $1
RETURNING *;

-- name: loop_defer_turn :one
-- NetworkCalling, when a provider limit or back-off holds a claimed turn; fence: status
-- running, execution_token = $2 and the turn's lease held. Hands the turn back queued on
-- the SAME generation with a job due at $3 (no worker slot or connection is held while it
-- waits); hides a streaming shell; the loop keeps its concurrency-key slot.
-- $1 id uuid · $2 execution_token uuid · $3 run_at timestamptz · $4 status_reason text
WITH u AS (
    UPDATE loops SET status = 'queued', lease_expires_at = NULL, worker_id = NULL,
        status_reason = $4, updated_at = now()
    WHERE id = $1 AND execution_token = $2 AND status = 'running'
      AND lease_expires_at IS NOT NULL
    RETURNING id, execution_token, lease_seconds
), s AS (
    UPDATE messages SET status = 'failed', hidden = true, updated_at = now()
    WHERE loop_id IN (SELECT id FROM u) AND status = 'processing'
), j AS (
    INSERT INTO jobs (queue, kind, loop_id, generation, lease_seconds, run_at)
    SELECT 'llm', 'llm_turn', id, execution_token, lease_seconds, greatest($3, now()) FROM u
    RETURNING id
)
SELECT u.id, (SELECT id FROM j) AS job_id FROM u;

-- name: loop_set_concurrency :one
-- Lifecycle start, in the insert's transaction; no fence (the loop is new, holds no slot).
-- $1 id uuid · $2 concurrency_key text · $3 concurrency_limit int
UPDATE loops SET concurrency_key = $2, concurrency_limit = $3
WHERE id = $1 AND NOT concurrency_held
RETURNING *;

-- name: loop_cost_by_agent :many
-- API /v1/costs and the admin dashboard: per agent, the cost and tokens of the loops
-- created in [$1, $2) (a range scan of loops_created); cost is null for an agent none of
-- whose turns had a price; no fence.
-- $1 since timestamptz · $2 until timestamptz · $3 agent text|null
SELECT agent, sum(cost) AS cost, count(*)::bigint AS loops,
       sum(cost_unpriced_turns)::bigint AS unpriced_turns,
       sum(tokens_prompt)::bigint AS tokens_prompt,
       sum(tokens_completion)::bigint AS tokens_completion,
       sum(tokens_cached)::bigint AS tokens_cached,
       sum(tokens_reasoning)::bigint AS tokens_reasoning
FROM loops
WHERE created_at >= $1 AND created_at < $2 AND ($3::text IS NULL OR agent = $3)
GROUP BY agent
ORDER BY agent;

-- name: loop_set_state :one
-- Lifecycle.patch_state under the loop lock; fence: the state version the writer read
-- (the 0014 trigger bumps it when the state actually changes).
-- $1 id uuid · $2 state_version bigint · $3 state jsonb
UPDATE loops SET state = $3, updated_at = now()
WHERE id = $1 AND state_version = $2
RETURNING *;

-- name: loop_lock_turn :one
-- engine/steering.py at a turn's start, before applying the messages due; fence: status
-- running AND execution_token = $2. Takes the row lock the send takes.
-- $1 id uuid · $2 execution_token uuid
SELECT id FROM loops WHERE id = $1 AND execution_token = $2 AND status = 'running'
FOR NO KEY UPDATE;

-- name: loop_set_parent :one
-- Child loops: link a loop just started by a tool call to its parent, in the transaction
-- that started it (engine/children.py); no fence (a new row).
-- $1 id uuid · $2 parent_id uuid · $3 parent_tool_call_id bigint · $4 depth int
UPDATE loops SET parent_id = $2, parent_tool_call_id = $3, depth = $4
WHERE id = $1
RETURNING *;

-- name: loop_count_child :exec
-- Child loops: the parent has one more child; under the parent's row lock (its fence).
-- $1 id uuid
UPDATE loops SET child_count = child_count + 1 WHERE id = $1;

-- name: loop_list_children :many
-- API, admin and the cascades (engine/cascade.py); oldest first; no fence.
-- $1 parent_id uuid
SELECT * FROM loops WHERE parent_id = $1 ORDER BY created_at, id;

-- name: loop_tree_spend :one
-- A parent's budget check: tokens and cost of the loop and its descendants; no fence.
-- $1 id uuid
SELECT tokens, cost FROM agentd_loop_tree_spend($1);

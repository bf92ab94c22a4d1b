-- name: agent_version_record :many
-- Every process at start, for each agent it loaded (engine/versions.py); returns the
-- versions that were new to the fleet (the others were recorded by an earlier process).
-- $1 versions jsonb (array of {id, agent, fingerprint, definition})
INSERT INTO agent_versions (id, agent, fingerprint, definition)
SELECT x.id, x.agent, x.fingerprint, x.definition
FROM jsonb_to_recordset($1::jsonb) AS x(id text, agent text, fingerprint text, definition jsonb)
ORDER BY x.id
ON CONFLICT (id) DO NOTHING
RETURNING id, agent, created_at;

-- name: agent_version_get :one
-- The upgrade routes and the tool gate; no fence (a version never changes).
-- $1 id text
SELECT * FROM agent_versions WHERE id = $1;

-- name: agent_version_newest :one
-- A start for an agent this process has no definition of; an upgrade with no target.
-- $1 agent text
SELECT * FROM agent_versions WHERE agent = $1 ORDER BY created_at DESC, id DESC LIMIT 1;

-- name: agent_version_list :many
-- GET /v1/agents: every version, with its active loops and the live workers that can run
-- it; no fence.
-- $1 stale_seconds float
SELECT v.id, v.agent, v.fingerprint, v.created_at,
       coalesce(v.definition ->> 'version_policy', 'pin') AS version_policy,
       coalesce(n.loops, 0)::bigint AS loops_active,
       coalesce((SELECT array_agg(w.id ORDER BY w.started_at)
                 FROM workers w JOIN worker_versions wv ON wv.worker_id = w.id
                 WHERE v.id = ANY (wv.agent_versions) AND NOT w.stopping
                   AND w.heartbeat_at > now() - make_interval(secs => $1)),
                '{}'::uuid[]) AS workers
FROM agent_versions v
LEFT JOIN (SELECT coalesce(upgrade_to, agent_version) AS version, count(*) AS loops
           FROM loops WHERE status IN ('queued', 'running', 'waiting')
           GROUP BY 1) n ON n.version = v.id
ORDER BY v.agent, v.created_at DESC, v.id;

-- name: agent_version_live :many
-- The versions some live worker claiming `queue` can run (a loop's waiting_for_version).
-- $1 queue text · $2 stale_seconds float
SELECT DISTINCT unnest(wv.agent_versions) AS id
FROM workers w JOIN worker_versions wv ON wv.worker_id = w.id
WHERE NOT w.stopping AND $1 = ANY (w.queues)
  AND w.heartbeat_at > now() - make_interval(secs => $2);

-- name: loop_adopt_version :val
-- A process registering an agent: that agent's loops with no version (none was known when
-- they were made, or they predate migrations/0025) run this process's version.
-- $1 agent text · $2 version text
-- Rows another process is adopting are skipped (SKIP LOCKED), never waited for.
WITH r AS (
    SELECT id FROM loops WHERE agent = $1 AND agent_version IS NULL
    FOR NO KEY UPDATE SKIP LOCKED
), u AS (
    UPDATE loops SET agent_version = $2 FROM r WHERE loops.id = r.id
    RETURNING 1
)
SELECT count(*)::bigint FROM u;

-- name: loop_mark_latest_upgrades :val
-- A version new to the fleet: the loops of its agent on a `latest` version move to it at
-- their next turn boundary (the worker applies upgrade_to when it starts a turn).
-- $1 agent text · $2 version text
WITH u AS (
    UPDATE loops l SET upgrade_to = $2, upgrade_by = 'version_policy:latest'
    FROM agent_versions v
    WHERE v.agent = $1 AND v.id = l.agent_version
      AND coalesce(v.definition ->> 'version_policy', 'pin') = 'latest'
      AND l.agent = $1 AND l.agent_version <> $2
      AND l.upgrade_to IS DISTINCT FROM $2
    RETURNING 1
)
SELECT count(*)::bigint FROM u;

-- name: loop_set_upgrade :one
-- POST /v1/loops/{id}/upgrade under the loop lock (lifecycle): the worker applies it when
-- the loop's next turn starts (engine/versions.py). The loop's own version or NULL: no
-- upgrade pending.
-- $1 id uuid · $2 to_version text|null · $3 by text (who asked: the audit)
UPDATE loops
SET upgrade_to = CASE WHEN $2 = agent_version THEN NULL ELSE $2 END,
    upgrade_by = CASE WHEN $2 = agent_version OR $2 IS NULL THEN NULL ELSE $3 END,
    updated_at = now()
WHERE id = $1
RETURNING *;

-- name: loop_apply_upgrade :one
-- Worker, when it starts a claimed turn whose loop has an upgrade asked for: a turn
-- boundary (no call of the loop is unresolved when its turn is claimed). Fenced by the
-- turn's token; the claim already holds the turn, so the row lock is uncontended. The
-- loop's MCP sessions listed before versions existed are stamped with the version it
-- leaves, so ToolDiscovery lists its tools again under the new one (loop, then sessions:
-- the lock order).
-- $1 id uuid · $2 execution_token uuid
WITH o AS (
    SELECT id, agent_version, upgrade_by FROM loops
    WHERE id = $1 AND execution_token = $2 AND upgrade_to IS NOT NULL
    FOR NO KEY UPDATE
), s AS (
    UPDATE mcp_sessions ms
    SET metadata = coalesce(ms.metadata, '{}'::jsonb)
                   || jsonb_build_object('agent_version', o.agent_version)
    FROM o
    WHERE ms.loop_id = o.id AND o.agent_version IS NOT NULL
      AND NOT coalesce(ms.metadata, '{}'::jsonb) ? 'agent_version'
)
UPDATE loops l SET agent_version = l.upgrade_to, upgrade_to = NULL, upgrade_by = NULL,
    updated_at = now()
FROM o WHERE l.id = o.id
RETURNING o.agent_version AS from_version, l.agent_version AS to_version, l.agent,
          o.upgrade_by AS requested_by;

-- name: loop_mark_waiting_for_version :many
-- Reaper: queued loops whose version (or the upgrade asked for) no live LLM worker can
-- run, while some live LLM worker runs (a fleet that is down is not this). They keep
-- their job and generation; a worker that has the version claims them as it comes.
-- $1 stale_seconds float · $2 limit int
WITH live AS (
    SELECT wv.agent_versions FROM workers w JOIN worker_versions wv ON wv.worker_id = w.id
    WHERE NOT w.stopping AND 'llm' = ANY (w.queues)
      AND w.heartbeat_at > now() - make_interval(secs => $1)
), r AS (
    SELECT l.id FROM loops l
    WHERE l.status = 'queued' AND NOT l.frozen
      AND l.status_reason IS DISTINCT FROM 'waiting_for_version'
      AND EXISTS (SELECT 1 FROM live)
      AND NOT EXISTS (SELECT 1 FROM live
                      WHERE coalesce(l.upgrade_to, l.agent_version) = ANY (live.agent_versions))
    ORDER BY l.id
    LIMIT $2
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE loops SET status_reason = 'waiting_for_version', updated_at = now()
FROM r WHERE loops.id = r.id
RETURNING loops.id, loops.agent, coalesce(loops.upgrade_to, loops.agent_version) AS version;

-- name: loop_count_waiting_for_version :many
-- Metrics; no fence.
SELECT agent, coalesce(coalesce(upgrade_to, agent_version), '') AS version,
       count(*)::bigint AS n
FROM loops WHERE status = 'queued' AND status_reason = 'waiting_for_version'
GROUP BY 1, 2;

-- name: agent_version_webhook :exec
-- agent.version_created and loop.upgraded, in the transaction that made them happen (the
-- 0013 function: one delivery per subscribed endpoint, nothing when none is).
-- $1 type text · $2 loop_id uuid|null · $3 data jsonb
SELECT agentd_webhook_enqueue($1, $2, $3);

-- name: loop_list_for_upgrade :many
-- POST /v1/agents/{name}/upgrade: the agent's loops not yet on (or moving to) the target,
-- optionally only those on one version; a page at a time (the caller repeats).
-- $1 agent text · $2 from_version text|null · $3 to_version text · $4 limit int
SELECT id FROM loops
WHERE agent = $1 AND ($2::text IS NULL OR agent_version = $2)
  AND coalesce(upgrade_to, agent_version, '') <> $3
ORDER BY id
LIMIT $4;

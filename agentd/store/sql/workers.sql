-- name: worker_register :exec
-- Worker start, on the heartbeat connection (records its backend for the liveness check).
-- Also records the agent versions this process can run (worker_versions, 0025: what its
-- claims ask for), and prunes the versions of workers that are gone.
-- $1 id uuid · $2 hostname text · $3 pid int · $4 queues text[] · $5 version text · $6 agent_versions text[]
WITH v AS (
    INSERT INTO worker_versions (worker_id, agent_versions) VALUES ($1, $6)
    ON CONFLICT (worker_id) DO UPDATE
    SET agent_versions = EXCLUDED.agent_versions, updated_at = now()
), gone AS (
    DELETE FROM worker_versions wv
    WHERE wv.worker_id <> $1 AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.id = wv.worker_id)
)
INSERT INTO workers (id, hostname, pid, queues, backend_pid, backend_start, version)
SELECT $1, $2, $3, $4, pg_backend_pid(), a.backend_start, $5
FROM pg_stat_activity a WHERE a.pid = pg_backend_pid()
ON CONFLICT (id) DO UPDATE
SET backend_pid = EXCLUDED.backend_pid, backend_start = EXCLUDED.backend_start,
    heartbeat_at = now(), stopping = false;

-- name: worker_heartbeat :val
-- LeaseRenewer each tick; false when the row was removed (we were declared dead).
-- $1 id uuid
UPDATE workers SET heartbeat_at = now() WHERE id = $1 RETURNING true;

-- name: worker_set_stopping :exec
-- Graceful shutdown.
-- $1 id uuid
UPDATE workers SET stopping = true WHERE id = $1;

-- name: worker_delete :exec
-- Graceful shutdown, last step.
-- $1 id uuid
DELETE FROM workers WHERE id = $1;

-- name: worker_list_dead :many
-- Liveness fast path: a worker whose heartbeat backend is gone (PostgreSQL notices a
-- killed client within milliseconds) or whose heartbeat is older than the stale limit.
-- $1 stale_seconds float
SELECT w.id FROM workers w
WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                  WHERE a.pid = w.backend_pid AND a.backend_start = w.backend_start)
   OR w.heartbeat_at < now() - make_interval(secs => $1);

-- name: worker_delete_many :exec
-- Liveness fast path, after reclaiming their work. A dead worker that still holds a row the
-- reaper can reclaim (one skipped because it was locked) stays, so the next pass finds it.
-- $1 ids uuid[]
DELETE FROM workers w
WHERE w.id = ANY($1::uuid[])
  AND NOT EXISTS (SELECT 1 FROM loops l
                  WHERE l.worker_id = w.id AND l.status = 'running'
                    AND l.lease_expires_at IS NOT NULL)
  AND NOT EXISTS (SELECT 1 FROM tool_calls t JOIN loops l ON l.id = t.loop_id
                  WHERE t.lease_worker_id = w.id AND t.response_message_id IS NULL
                    AND l.status IN ('running', 'waiting') AND NOT l.frozen);

-- name: worker_list :many
-- readyz, dashboard; no fence.
SELECT *, extract(epoch FROM now() - heartbeat_at) AS heartbeat_age FROM workers
ORDER BY started_at;

-- name: maintenance_record :exec
-- Reaper and janitor, fleet-wide last run.
-- $1 name text · $2 report jsonb
INSERT INTO maintenance (name, last_run_at, last_report) VALUES ($1, now(), $2)
ON CONFLICT (name) DO UPDATE SET last_run_at = now(), last_report = EXCLUDED.last_report;

-- name: maintenance_list :many
-- Dashboard, /readyz; no fence.
SELECT * FROM maintenance ORDER BY name;

-- name: db_ping :val
-- /readyz: the database answers.
SELECT 1;

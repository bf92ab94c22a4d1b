-- name: schedule_upsert :one
-- API create and config sync; a config sync never overwrites an API schedule's fields.
-- $1 name text · $2 agent text · $3 message text · $4 subject text · $5 state jsonb · $6 cron text · $7 timezone text · $8 next_run_at timestamptz · $9 overlap text · $10 source text · $11 enabled bool
INSERT INTO schedules (name, agent, message, subject, state, cron, timezone, next_run_at,
                       overlap, source, enabled)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (name) DO UPDATE
SET agent = EXCLUDED.agent, message = EXCLUDED.message, subject = EXCLUDED.subject,
    state = EXCLUDED.state, cron = EXCLUDED.cron, timezone = EXCLUDED.timezone,
    next_run_at = CASE WHEN schedules.cron IS NOT DISTINCT FROM EXCLUDED.cron
                        AND schedules.timezone = EXCLUDED.timezone
                       THEN coalesce(schedules.next_run_at, EXCLUDED.next_run_at)
                       ELSE EXCLUDED.next_run_at END,
    overlap = EXCLUDED.overlap, enabled = EXCLUDED.enabled, updated_at = now()
WHERE schedules.source = EXCLUDED.source
RETURNING *;

-- name: schedule_get :one
-- API; no fence.
-- $1 name text
SELECT * FROM schedules WHERE name = $1;

-- name: schedule_list :many
-- API; no fence.
SELECT * FROM schedules ORDER BY name;

-- name: schedule_delete :one
-- API.
-- $1 name text
DELETE FROM schedules WHERE name = $1 RETURNING *;

-- name: schedule_set_enabled :one
-- API pause/resume of a schedule.
-- $1 name text · $2 enabled bool · $3 next_run_at timestamptz|null
UPDATE schedules SET enabled = $2, next_run_at = coalesce($3, next_run_at), updated_at = now()
WHERE name = $1 RETURNING *;

-- name: schedule_claim_due :many
-- Scheduler tick; locks due schedules so each tick fires on exactly one process.
-- $1 limit int
SELECT s.*, EXISTS (SELECT 1 FROM loops l WHERE l.schedule_id = s.id
                      AND l.status IN ('queued', 'running', 'waiting')) AS active
FROM schedules s
WHERE s.enabled AND s.next_run_at <= now()
ORDER BY s.next_run_at
LIMIT $1
FOR UPDATE OF s SKIP LOCKED;

-- name: schedule_claim_pending :many
-- Scheduler tick, overlap=queue: schedules with queued runs and no active loop.
-- $1 limit int
SELECT s.* FROM schedules s
WHERE s.pending_runs > 0 AND s.enabled
  AND NOT EXISTS (SELECT 1 FROM loops l WHERE l.schedule_id = s.id
                    AND l.status IN ('queued', 'running', 'waiting'))
ORDER BY s.id
LIMIT $1
FOR UPDATE OF s SKIP LOCKED;

-- name: schedule_advance :exec
-- Scheduler tick, under the row lock from schedule_claim_due/pending.
-- $1 id bigint · $2 next_run_at timestamptz|null · $3 started_loop uuid|null · $4 pending_delta int · $5 skipped int
UPDATE schedules
SET next_run_at = $2,
    last_run_at = CASE WHEN $3::uuid IS NULL THEN last_run_at ELSE now() END,
    last_loop_id = coalesce($3, last_loop_id),
    runs = runs + CASE WHEN $3::uuid IS NULL THEN 0 ELSE 1 END,
    pending_runs = greatest(pending_runs + $4, 0),
    skipped_runs = skipped_runs + $5,
    updated_at = now()
WHERE id = $1;

-- name: schedule_link_loop :exec
-- Scheduler tick: the loop it started belongs to the schedule (overlap checks).
-- $1 loop_id uuid · $2 schedule_id bigint
UPDATE loops SET schedule_id = $2 WHERE id = $1;

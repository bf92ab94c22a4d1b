-- name: webhook_endpoint_upsert :one
-- WebhookDeliverer.sync_config at worker start: a `[[webhooks]]` entry (by url).
-- $1 url text · $2 events text[] · $3 secret_env text
INSERT INTO webhook_endpoints (url, events, secret_env) VALUES ($1, $2, $3)
ON CONFLICT (url) DO UPDATE
SET events = EXCLUDED.events, secret_env = EXCLUDED.secret_env, enabled = true,
    disabled_reason = NULL, updated_at = now()
RETURNING *;

-- name: webhook_endpoint_gone :one
-- WebhookDeliverer: the endpoint answered 410 Gone (Standard Webhooks: stop sending to it).
-- Disables it and fails its pending deliveries that no attempt holds right now (the one
-- that got the 410 is finished by its own attempt). No fence; null when already disabled.
-- $1 id bigint · $2 last_error text
WITH e AS (
    UPDATE webhook_endpoints SET enabled = false, disabled_reason = 'gone', updated_at = now()
    WHERE id = $1 AND enabled
    RETURNING *
), d AS (
    UPDATE webhook_deliveries
    SET status = 'failed', last_error = $2, updated_at = now()
    WHERE endpoint_id = (SELECT id FROM e) AND status = 'pending'
      AND (lease_token IS NULL OR leased_until < now())
    RETURNING 1
)
SELECT e.*, 0::bigint AS pending, (SELECT count(*) FROM d)::bigint AS failed FROM e;

-- name: webhook_endpoint_disable_others :exec
-- WebhookDeliverer.sync_config: endpoints no longer in the config get no new deliveries.
-- $1 keep_ids bigint[]
UPDATE webhook_endpoints SET enabled = false, updated_at = now()
WHERE enabled AND NOT (id = ANY($1::bigint[]));

-- name: webhook_endpoint_list :many
-- Admin and API; no fence.
SELECT e.*,
       (SELECT count(*) FROM webhook_deliveries d
        WHERE d.endpoint_id = e.id AND d.status = 'pending')::bigint AS pending,
       (SELECT count(*) FROM webhook_deliveries d
        WHERE d.endpoint_id = e.id AND d.status = 'failed')::bigint AS failed
FROM webhook_endpoints e ORDER BY e.id;

-- name: webhook_delivery_claim :many
-- WebhookDeliverer: due deliveries to this process's endpoints, leased to it. A lease is
-- free when it expired or its worker's heartbeat backend is gone (a SIGKILLed worker's
-- deliveries are taken over at once, and re-sent with the same message_id).
-- $1 endpoint_ids bigint[] · $2 lease_token uuid · $3 worker_id uuid · $4 lease_seconds float · $5 limit int
WITH c AS (
    SELECT d.id FROM webhook_deliveries d
    WHERE d.status = 'pending' AND d.next_attempt_at <= now()
      AND d.endpoint_id = ANY($1::bigint[])
      -- disabled since this process synced (410 Gone, or another process's config)
      AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.id = d.endpoint_id AND e.enabled)
      AND (d.lease_token IS NULL OR d.leased_until < now()
           OR NOT EXISTS (SELECT 1 FROM workers w
                          JOIN pg_stat_activity a
                            ON a.pid = w.backend_pid AND a.backend_start = w.backend_start
                          WHERE w.id = d.lease_worker_id))
    ORDER BY d.next_attempt_at, d.id
    LIMIT $5
    FOR UPDATE OF d SKIP LOCKED
)
UPDATE webhook_deliveries d
SET lease_token = $2, lease_worker_id = $3,
    leased_until = now() + make_interval(secs => $4::float8),
    attempts = d.attempts + 1, last_attempt_at = now(), updated_at = now()
FROM c WHERE d.id = c.id
RETURNING d.*;

-- name: webhook_delivery_finish :one
-- WebhookDeliverer after an attempt; fence: still this lease. delivered, else retried after
-- $6 seconds, else (null) failed for good.
-- $1 id bigint · $2 lease_token uuid · $3 delivered bool · $4 last_status int|null · $5 last_error text|null · $6 retry_delay float|null
UPDATE webhook_deliveries
SET status = CASE WHEN $3 THEN 'delivered' WHEN $6::float8 IS NULL THEN 'failed'
                  ELSE 'pending' END,
    delivered_at = CASE WHEN $3 THEN now() ELSE delivered_at END,
    next_attempt_at = CASE WHEN NOT $3 AND $6::float8 IS NOT NULL
                           THEN now() + make_interval(secs => $6::float8)
                           ELSE next_attempt_at END,
    last_status = $4, last_error = $5,
    lease_token = NULL, leased_until = NULL, lease_worker_id = NULL, updated_at = now()
WHERE id = $1 AND lease_token = $2
RETURNING *;

-- name: webhook_delivery_resend :one
-- Admin/API re-send: due now, with the same message_id; one in flight is left alone.
-- $1 id bigint
UPDATE webhook_deliveries
SET status = 'pending', next_attempt_at = now(), updated_at = now()
WHERE id = $1 AND NOT (lease_token IS NOT NULL AND leased_until > now())
RETURNING *;

-- name: webhook_delivery_get :one
-- Admin and API; no fence.
-- $1 id bigint
SELECT d.*, e.url FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
WHERE d.id = $1;

-- name: webhook_delivery_list :many
-- Admin and API: newest first, keyset by id; no fence.
-- $1 status text|null · $2 before_id bigint · $3 limit int
SELECT d.*, e.url FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
WHERE ($1::text IS NULL OR d.status = $1) AND d.id < $2
ORDER BY d.id DESC
LIMIT $3;

-- name: webhook_delivery_notify :exec
-- Re-send: wakes the deliverers at commit.
SELECT pg_notify('agentd_jobs', 'webhook');

-- name: webhook_delivery_prune :val
-- Janitor: one batch of finished deliveries last touched before the cutoff
-- (webhook_deliveries_finished); pending ones stay whatever their age.
-- $1 cutoff timestamptz · $2 batch int
WITH d AS (
    DELETE FROM webhook_deliveries WHERE id IN (
        SELECT id FROM webhook_deliveries
        WHERE status IN ('delivered', 'failed') AND updated_at < $1
        ORDER BY updated_at LIMIT $2)
    RETURNING 1
)
SELECT count(*)::bigint FROM d;

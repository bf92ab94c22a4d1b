-- name: provider_blocked_until :val
-- NetworkCalling, before every model call (one indexed read, no lock); no fence.
-- NULL unless the provider key is inside a back-off a 429/503 Retry-After set.
-- $1 id text
SELECT blocked_until FROM provider_state WHERE id = $1 AND blocked_until > clock_timestamp();

-- name: provider_lock :val
-- NetworkCalling admission, first statement of its transaction: creates the provider's
-- row if new and locks it, so racing admissions on one key (any worker) serialize; the
-- next statement then takes a fresh snapshot that sees every earlier admission.
-- $1 id text · $2 base_url text · $3 model text · $4 key_fingerprint text · $5 max_concurrency int|null · $6 rpm int|null · $7 tpm int|null
INSERT INTO provider_state AS p (id, base_url, model, key_fingerprint, max_concurrency, rpm, tpm)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (id) DO UPDATE
SET max_concurrency = EXCLUDED.max_concurrency, rpm = EXCLUDED.rpm, tpm = EXCLUDED.tpm,
    updated_at = now()
RETURNING p.blocked_until;

-- name: provider_admit :one
-- NetworkCalling admission, under provider_lock's row lock; no loop fence (a turn that
-- lost its fence only wastes its slot until its loop moves on). Admits the call (records
-- a request row: a window entry and, while unsettled and its turn holds the lease, a
-- concurrency slot) or says why not and when to try again. A window is the last $9
-- seconds; a request is admitted when the window is empty or its estimate still fits.
-- $1 id text · $2 loop_id uuid · $3 execution_token uuid · $4 max_concurrency int|null · $5 rpm int|null · $6 tpm int|null · $7 estimate int · $8 retry_seconds float · $9 window_seconds float
WITH w AS (
    SELECT r.id, r.admitted_at, r.tokens FROM provider_requests r
    WHERE r.provider_id = $1 AND r.admitted_at > clock_timestamp() - make_interval(secs => $9)
), agg AS (
    SELECT count(*)::int AS requests, coalesce(sum(tokens), 0)::bigint AS tokens FROM w
), f AS (
    SELECT count(*)::int AS in_flight
    FROM provider_requests r JOIN loops l ON l.id = r.loop_id
    WHERE r.provider_id = $1 AND NOT r.settled AND r.loop_id <> $2
      AND l.execution_token = r.execution_token AND l.status = 'running'
      AND l.lease_expires_at IS NOT NULL
), d AS (
    SELECT CASE
               WHEN p.blocked_until > clock_timestamp() THEN 'provider_backoff'
               WHEN $4::int IS NOT NULL AND f.in_flight >= $4::int THEN 'provider_concurrency'
               WHEN $5::int IS NOT NULL AND agg.requests >= $5::int THEN 'provider_rpm'
               WHEN $6::int IS NOT NULL AND agg.tokens > 0 AND agg.tokens + $7 > $6::int
                   THEN 'provider_tpm'
           END AS reason,
           p.blocked_until, agg.requests, agg.tokens
    FROM agg, f, provider_state p WHERE p.id = $1
), ins AS (
    INSERT INTO provider_requests (provider_id, loop_id, execution_token, tokens)
    SELECT $1, $2, $3, $7 FROM d WHERE d.reason IS NULL
    RETURNING id
), pruned AS (
    DELETE FROM provider_requests r
    WHERE r.provider_id = $1 AND r.admitted_at < clock_timestamp() - make_interval(secs => $9)
      AND (r.settled OR NOT EXISTS (SELECT 1 FROM loops l
                                    WHERE l.id = r.loop_id AND l.status = 'running'
                                      AND l.execution_token = r.execution_token
                                      AND l.lease_expires_at IS NOT NULL))
), st AS (
    UPDATE provider_state
    SET admitted = admitted + (d.reason IS NULL)::int,
        deferred = deferred + (d.reason IS NOT NULL)::int
    FROM d WHERE provider_state.id = $1
)
SELECT d.reason,
       (SELECT id FROM ins) AS request_id,
       CASE d.reason
           WHEN 'provider_backoff' THEN d.blocked_until
           WHEN 'provider_concurrency' THEN clock_timestamp() + make_interval(secs => $8)
           -- rpm: when the oldest requests that must leave the window have left it
           WHEN 'provider_rpm' THEN
               (SELECT w.admitted_at FROM w ORDER BY w.admitted_at, w.id
                OFFSET greatest(d.requests - $5::int, 0) LIMIT 1) + make_interval(secs => $9)
           -- tpm: when enough of the oldest tokens have left the window for this estimate
           WHEN 'provider_tpm' THEN
               (SELECT x.admitted_at
                FROM (SELECT w.admitted_at, w.id,
                             d.tokens - sum(w.tokens) OVER (ORDER BY w.admitted_at, w.id)
                                 AS remaining
                      FROM w) x
                WHERE x.remaining <= 0 OR x.remaining + $7 <= $6::int
                ORDER BY x.admitted_at, x.id LIMIT 1) + make_interval(secs => $9)
       END AS retry_at
FROM d;

-- name: provider_request_settle :exec
-- NetworkCalling after the model answered (or throttled); no fence. Frees the request's
-- concurrency slot and replaces the admission estimate with the tokens the provider
-- reported ($2 NULL: keep the estimate).
-- $1 request_id bigint · $2 tokens int|null
UPDATE provider_requests
SET settled = true, tokens = coalesce($2, tokens), estimated = estimated AND $2 IS NULL
WHERE id = $1;

-- name: provider_block :val
-- NetworkCalling on a 429/503 carrying Retry-After; no fence. Every worker's turns on the
-- key wait until the returned deadline; a later deadline is never shortened.
-- $1 id text · $2 base_url text · $3 model text · $4 key_fingerprint text · $5 seconds float · $6 status int
INSERT INTO provider_state AS p (id, base_url, model, key_fingerprint, blocked_until,
                                 last_status, last_throttled_at, throttled)
VALUES ($1, $2, $3, $4, clock_timestamp() + make_interval(secs => $5), $6, clock_timestamp(), 1)
ON CONFLICT (id) DO UPDATE
SET blocked_until = greatest(p.blocked_until, EXCLUDED.blocked_until),
    last_status = EXCLUDED.last_status, last_throttled_at = EXCLUDED.last_throttled_at,
    throttled = p.throttled + 1, updated_at = now()
RETURNING p.blocked_until;

-- name: provider_list :many
-- API, metrics and the dashboard; no fence.
-- $1 window_seconds float
SELECT p.*,
       greatest(extract(epoch FROM p.blocked_until - clock_timestamp()), 0)::float8
           AS blocked_seconds,
       (SELECT count(*) FROM provider_requests r
        WHERE r.provider_id = p.id
          AND r.admitted_at > clock_timestamp() - make_interval(secs => $1))::bigint
           AS window_requests,
       (SELECT coalesce(sum(r.tokens), 0) FROM provider_requests r
        WHERE r.provider_id = p.id
          AND r.admitted_at > clock_timestamp() - make_interval(secs => $1))::bigint
           AS window_tokens,
       (SELECT count(*) FROM provider_requests r JOIN loops l ON l.id = r.loop_id
        WHERE r.provider_id = p.id AND NOT r.settled AND l.status = 'running'
          AND l.execution_token = r.execution_token
          AND l.lease_expires_at IS NOT NULL)::bigint AS in_flight
FROM provider_state p
ORDER BY p.base_url, p.model, p.id;

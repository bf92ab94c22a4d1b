-- name: idempotency_key_get :one
-- API (POST /v1/loops with Idempotency-Key): the loop a live key started; no fence. A key
-- past the window counts as absent.
-- $1 key text · $2 window_seconds float
SELECT key, request_hash, loop_id, created_at FROM loop_idempotency_keys
WHERE key = $1 AND created_at > now() - make_interval(secs => $2);

-- name: idempotency_key_claim :one
-- API, in the transaction that starts the loop: records the key, or takes over one past the
-- window. No row back means a concurrent request holds the key: the caller rolls back
-- its loop and answers with that request's (the unique key serializes the two).
-- $1 key text · $2 request_hash bytea · $3 loop_id uuid · $4 window_seconds float
INSERT INTO loop_idempotency_keys AS k (key, request_hash, loop_id)
VALUES ($1, $2, $3)
ON CONFLICT (key) DO UPDATE
    SET request_hash = excluded.request_hash, loop_id = excluded.loop_id, created_at = now()
    WHERE k.created_at <= now() - make_interval(secs => $4)
RETURNING loop_id;

-- name: idempotency_key_prune :val
-- Janitor: deletes one batch of keys created before the cutoff (loop_idempotency_keys_created).
-- $1 cutoff timestamptz · $2 batch int
WITH d AS (
    DELETE FROM loop_idempotency_keys WHERE key IN (
        SELECT key FROM loop_idempotency_keys WHERE created_at < $1 ORDER BY created_at LIMIT $2)
    RETURNING 1
)
SELECT count(*)::bigint FROM d;

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

-- name: idempotency_key_get_many :many
-- API (POST /v1/loops:batch): the loops live keys started, for a batch's keyed items in one
-- read; no fence. A key past the window counts as absent.
-- $1 keys text[] · $2 window_seconds float
SELECT key, request_hash, loop_id, created_at FROM loop_idempotency_keys
WHERE key = ANY ($1::text[]) AND created_at > now() - make_interval(secs => $2);

-- name: idempotency_key_claim_many :many
-- API (POST /v1/loops:batch), in the transaction that starts the batch's loops: records
-- each key (or takes over one past the window), in key order so two batches sharing keys
-- wait for each other instead of deadlocking. A key missing from the answer is held by a
-- concurrent request: the caller rolls the whole batch back and reads it again.
-- $1 keys text[] · $2 request_hashes bytea[] · $3 loop_ids uuid[] · $4 window_seconds float
INSERT INTO loop_idempotency_keys AS k (key, request_hash, loop_id)
SELECT u.key, u.request_hash, u.loop_id
FROM unnest($1::text[], $2::bytea[], $3::uuid[]) AS u (key, request_hash, loop_id)
ORDER BY u.key
ON CONFLICT (key) DO UPDATE
    SET request_hash = excluded.request_hash, loop_id = excluded.loop_id, created_at = now()
    WHERE k.created_at <= now() - make_interval(secs => $4)
RETURNING key;

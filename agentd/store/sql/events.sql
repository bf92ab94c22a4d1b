-- name: event_insert_many :exec
-- EventLogging / finalizers / lifecycle; append-only, no fence.
-- $1 loop_ids uuid[] · $2 names text[] · $3 reasons text[] · $4 methods text[] · $5 urls text[] · $6 statuses int[] · $7 requests jsonb[] · $8 responses jsonb[] · $9 durations float[] · $10 logs text[] · $11 tool_call_ids bigint[] · $12 message_ids bigint[] · $13 inbound_ids bigint[]
INSERT INTO events (loop_id, name, reason, http_method, url, status, request_data,
                    response_data, duration, log, tool_call_id, message_id, inbound_session_id)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int[],
                     $7::jsonb[], $8::jsonb[], $9::float8[], $10::text[], $11::bigint[],
                     $12::bigint[], $13::bigint[]);

-- name: event_list :many
-- API; keyset by id.
-- $1 loop_id uuid · $2 after_id bigint · $3 limit int
SELECT * FROM events WHERE loop_id = $1 AND id > $2 ORDER BY id LIMIT $3;

-- name: event_prune :val
-- Janitor; one batch of events older than the cutoff.
-- $1 cutoff timestamptz · $2 batch int
WITH d AS (
    DELETE FROM events WHERE id IN (
        SELECT id FROM events WHERE created_at < $1 ORDER BY id LIMIT $2)
    RETURNING 1
)
SELECT count(*)::bigint FROM d;

-- name: event_publish :exec
-- Live observers (SSE): a committed message, a status change or a streamed delta; sent at
-- commit of the caller's transaction. Only for observed loops on the worker's hot path.
-- $1 payload text (JSON, < 8000 bytes)
SELECT pg_notify('agentd_stream', $1);

-- name: event_control :exec
-- Lifecycle (pause/stop/freeze): tells every worker to cancel the loop's in-flight turn.
-- $1 payload text (JSON)
SELECT pg_notify('agentd_control', $1);

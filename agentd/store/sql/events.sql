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

-- name: event_list_named :many
-- Admin loop page: the loop's events of the given names (e.g. the reaper's reclaims), via
-- events_loop; no fence.
-- $1 loop_id uuid · $2 names text[] · $3 limit int
SELECT * FROM events WHERE loop_id = $1 AND name = ANY($2::text[]) ORDER BY id LIMIT $3;

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

-- name: event_activity_per_minute :many
-- Admin dashboard: turns, tool results and failures per minute over a recent window, a range
-- scan of events_created; no fence.
-- $1 window_seconds float
SELECT date_trunc('minute', created_at) AS minute,
       count(*) FILTER (WHERE name IN ('turn.completed', 'turn.tool_calls'))::bigint AS turns,
       count(*) FILTER (WHERE name = 'tool_call.completed')::bigint AS tool_calls,
       count(*) FILTER (WHERE name = 'loop.failed')::bigint AS failures
FROM events
WHERE created_at >= now() - make_interval(secs => $1)
GROUP BY 1
ORDER BY 1;

-- name: event_failure_reasons :many
-- Admin dashboard: loop failures over a recent window grouped by reason, with the newest
-- message and loop of each; a range scan of events_created; no fence.
-- $1 window_seconds float · $2 limit int
SELECT coalesce(reason, 'unknown') AS reason, count(*)::bigint AS n, max(created_at) AS last_at,
       (array_agg(log ORDER BY id DESC))[1] AS last_log,
       (array_agg(loop_id ORDER BY id DESC))[1] AS last_loop_id
FROM events
WHERE name = 'loop.failed' AND created_at >= now() - make_interval(secs => $1)
GROUP BY 1
ORDER BY n DESC, last_at DESC
LIMIT $2;

-- name: event_list_for_inbound :many
-- Admin: an inbound MCP session's event history (events_inbound); keyset by id; no fence.
-- $1 inbound_session_id bigint · $2 after_id bigint · $3 limit int
SELECT * FROM events WHERE inbound_session_id = $1 AND id > $2 ORDER BY id LIMIT $3;

-- name: event_publish_many :exec
-- StreamFlusher: every observed stream's pending delta, in one statement.
-- $1 payloads text[] (JSON, each < 8000 bytes)
SELECT pg_notify('agentd_stream', p) FROM unnest($1::text[]) AS p;

-- name: event_list_feed :many
-- API fleet feed (GET /v1/events): one window of ids, a range scan of the primary key (or
-- of events_loop with a loop); every filter optional; no fence.
-- $1 after_id bigint · $2 upto_id bigint · $3 loop_id uuid|null · $4 agent text|null · $5 names text[]|null · $6 limit int
SELECT e.* FROM events e
WHERE e.id > $1 AND e.id <= $2
  AND ($3::uuid IS NULL OR e.loop_id = $3)
  AND ($4::text IS NULL OR EXISTS (SELECT 1 FROM loops l WHERE l.id = e.loop_id AND l.agent = $4))
  AND ($5::text[] IS NULL OR e.name = ANY($5::text[]))
ORDER BY e.id
LIMIT $6;

-- name: event_feed_horizon :val
-- API fleet feed: the highest id it may serve. Ids are taken at insert but visible at
-- commit, so a reader past a young id could skip a lower one that commits later: the feed
-- stops short of the oldest event younger than $1 seconds (a range scan of events_created)
-- and so skips nothing whose transaction lasted less than that.
-- $1 settle_seconds float
SELECT coalesce(
    (SELECT min(y.id) - 1 FROM events y
     WHERE y.created_at >= now() - make_interval(secs => $1::float8)),
    (SELECT max(id) FROM events),
    0)::bigint;

-- name: event_max_id :val
-- API fleet feed: where a tail starts when the client gives no position; no fence.
SELECT coalesce(max(id), 0)::bigint FROM events;

-- name: event_wire_parts :many
-- Reading a loop's events: every wire part of the loop, to rebuild new-form request bodies
-- (functions/wire_parts.sql); no fence.
-- $1 loop_id uuid
SELECT encode(key, 'hex') AS key, body FROM wire_parts WHERE loop_id = $1;

-- name: event_prune_wire :val
-- Janitor (wire-log retention); one batch of llm.request / mcp.* events older than the
-- cutoff, oldest first, along events_wire_created (migrations/0001_baseline.sql); no fence.
-- $1 cutoff timestamptz · $2 batch int
WITH d AS (
    DELETE FROM events WHERE id IN (
        SELECT id FROM events
        WHERE created_at < $1 AND (name = 'llm.request' OR name LIKE 'mcp.%')
        ORDER BY created_at, id LIMIT $2)
    RETURNING 1
)
SELECT count(*)::bigint FROM d;

-- name: event_prune_wire_parts :val
-- Janitor (wire-log retention); one batch of parts of loops whose newest part is older
-- than the cutoff. A part stored again since is touched by the insert trigger, and this
-- DELETE re-checks created_at on the version it finds; no fence.
-- $1 cutoff timestamptz · $2 batch int
WITH c AS (
    SELECT p.loop_id, p.key FROM wire_parts p
    WHERE p.created_at < $1
      AND NOT EXISTS (SELECT 1 FROM wire_parts n
                      WHERE n.loop_id = p.loop_id AND n.created_at >= $1)
    ORDER BY p.created_at LIMIT $2
), d AS (
    DELETE FROM wire_parts w USING c
    WHERE w.loop_id = c.loop_id AND w.key = c.key AND w.created_at < $1
    RETURNING 1
)
SELECT count(*)::bigint FROM d;

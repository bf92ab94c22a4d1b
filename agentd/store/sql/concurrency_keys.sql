-- name: concurrency_key_list :many
-- API and the dashboard: keys with at least one loop holding a slot, busiest first; no
-- fence. (Loops waiting for a slot are not counted here: loops has no index on the key.)
-- $1 limit int
SELECT key, running, updated_at FROM concurrency_keys
WHERE running > 0
ORDER BY running DESC, key
LIMIT $1;

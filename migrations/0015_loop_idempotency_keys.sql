-- Idempotency keys of POST /v1/loops: a client retrying a start after a timeout sends the
-- same Idempotency-Key and gets the loop the first attempt started.
-- Expand-only: a new table; older code never reads it (an old API simply ignores the
-- header, as it always did).
--   key           the client's Idempotency-Key header, as sent
--   request_hash  sha256 of the request body as parsed (same key, other body: refused)
--   loop_id       the loop the first request started
--   created_at    the window (AGENTD_IDEMPOTENCY_KEY_RETENTION) counts from here; the
--                 janitor deletes keys past it, and a key past it is free for reuse

CREATE TABLE loop_idempotency_keys (
    key          text PRIMARY KEY,
    request_hash bytea NOT NULL,
    loop_id      uuid NOT NULL REFERENCES loops (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX loop_idempotency_keys_created ON loop_idempotency_keys (created_at);
-- The foreign key's ON DELETE CASCADE looks keys up by loop.
CREATE INDEX loop_idempotency_keys_loop ON loop_idempotency_keys (loop_id);

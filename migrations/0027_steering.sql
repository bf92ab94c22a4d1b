-- Steering messages (POST /v1/loops/{id}/messages on a running or waiting loop, with a
-- `mode`): each message sent is one row of loop_inputs, kept once applied (its message_id
-- then names the transcript row it became), so a retried send with its Idempotency-Key
-- answers with the first. Expand-only: a new table and two loop columns with defaults;
-- older code never reads them (an older finalize completes a loop whose queued messages
-- then wait, pending, for the next send or resume to apply them).
--   loops.steer_pending  pending rows of loop_inputs (kept under the loop's row lock by the
--                        send and the apply): a finalize that would complete the loop reads
--                        it on the row it updates, so a message sent while the turn ran
--                        continues the loop instead, whatever the timing
--   loops.steer_release  the run ended with messages pending: the next turn applies all of
--                        them, `queue` ones too
--   loop_inputs.mode     queue | inject | interrupt, as sent
--   loop_inputs.status   pending | applied
--   loop_inputs.request_hash  sha256 of the request as parsed (same key, other body: 422)

ALTER TABLE loops ADD COLUMN IF NOT EXISTS steer_pending integer NOT NULL DEFAULT 0;
ALTER TABLE loops ADD COLUMN IF NOT EXISTS steer_release boolean NOT NULL DEFAULT false;

CREATE TABLE IF NOT EXISTS loop_inputs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    loop_id          uuid NOT NULL REFERENCES loops (id) ON DELETE CASCADE,
    mode             text NOT NULL CHECK (mode IN ('queue', 'inject', 'interrupt')),
    content          text NOT NULL,
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'applied')),
    message_id       bigint,  -- no foreign key: one hot table (loops) per migration
    idempotency_key  text,
    request_hash     bytea,
    sent_by          text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    applied_at       timestamptz
);

CREATE INDEX IF NOT EXISTS loop_inputs_pending ON loop_inputs (loop_id, id)
    WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS loop_inputs_loop ON loop_inputs (loop_id, id);
CREATE UNIQUE INDEX IF NOT EXISTS loop_inputs_idempotency_key
    ON loop_inputs (loop_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

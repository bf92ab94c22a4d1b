-- Long loops, on the loops table (one hot table per migration: docs/upgrading.md).
-- Expand-only: older code never names these columns and reads rows by name.
--   tokens_estimated        some of the loop's token counts are chars/4 estimates, not usage
--   forked_from_loop_id     the loop this one was forked from (POST /v1/loops/{id}/fork)
--   forked_from_message_id  the message of that loop the fork was taken at

ALTER TABLE loops
    ADD COLUMN tokens_estimated boolean NOT NULL DEFAULT false,
    ADD COLUMN forked_from_loop_id uuid REFERENCES loops(id) ON DELETE SET NULL,
    ADD COLUMN forked_from_message_id bigint;

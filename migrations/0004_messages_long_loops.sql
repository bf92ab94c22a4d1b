-- Long loops, on the messages table (one hot table per migration: docs/upgrading.md).
-- Expand-only: older code never names these columns and reads rows by name.
--   tokens_estimated        tokens_* are chars/4 estimates (the provider reported no usage)
--   summary_through         set on a compaction summary: the last message id it covers; the
--                           prompt is [system, summary, messages after that id...]
--   superseded_at           regenerate: the message left the prompt but stays on record
--   forked_from_message_id  fork: the source message this row was copied from

ALTER TABLE messages
    ADD COLUMN tokens_estimated boolean NOT NULL DEFAULT false,
    ADD COLUMN summary_through bigint,
    ADD COLUMN superseded_at timestamptz,
    ADD COLUMN forked_from_message_id bigint;

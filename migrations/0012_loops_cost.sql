-- Cost and speed roll-ups, on the loops table (one hot table per migration:
-- docs/upgrading.md). Expand-only: older code never names these columns and reads rows by
-- name. Each finalized turn adds to them in the finalize's own statement.
--   cost                 USD, exact: the sum of the turns that had a price; NULL until the
--                        first priced turn (a loop on an unknown model has no cost, not 0)
--   cost_unpriced_turns  turns whose model had no price (their cost is not in `cost`)
--   tokens_reasoning     reasoning tokens (part of tokens_completion, not added to it)
--   ttft_total           seconds to first token, summed over the streamed turns ...
--   ttft_turns           ... and how many there were (mean = total / turns)
--   generation_seconds   seconds spent generating, over the turns counted in ...
--   generation_tokens    ... these output tokens (loop tps = tokens / seconds)
-- The per-message figures (cost, tps, model) travel in messages.metadata -> 'usage', the
-- cost as a decimal string, so this migration alters one table only.

ALTER TABLE loops
    ADD COLUMN cost numeric(20, 10),
    ADD COLUMN cost_unpriced_turns integer NOT NULL DEFAULT 0,
    ADD COLUMN tokens_reasoning bigint NOT NULL DEFAULT 0,
    ADD COLUMN ttft_total double precision NOT NULL DEFAULT 0,
    ADD COLUMN ttft_turns integer NOT NULL DEFAULT 0,
    ADD COLUMN generation_seconds double precision NOT NULL DEFAULT 0,
    ADD COLUMN generation_tokens bigint NOT NULL DEFAULT 0;

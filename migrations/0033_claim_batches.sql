-- Claims serve loops already in flight before new ones (job_claim_llm): a loop's first turn
-- is enqueued with first_turn true, every later turn and every tool call false, and the
-- claim orders by (first_turn, run_at, id). Expand-only: older processes never name the
-- column, and their jobs get the default (served as in-flight work, as they were).
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS first_turn boolean NOT NULL DEFAULT false;
-- The claim's order, so a claim reads continuations off the index head however many
-- first turns wait behind them.
CREATE INDEX IF NOT EXISTS jobs_ready_first ON jobs (queue, first_turn, run_at, id);

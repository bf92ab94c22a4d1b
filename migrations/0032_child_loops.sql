-- Child loops (agents as tools, docs/agents.md "Child loops"): a loop started by another
-- loop's tool call, linked to it. Expand-only: nullable or defaulted columns older code
-- never names, and one partial index.
--   loops.parent_id            the loop whose tool call started this one (NULL: a root)
--   loops.parent_tool_call_id  that tool call
--   loops.depth                0 for a root, parent's depth + 1 for a child
--   loops.child_count          children started so far (a parent's budget check reads the
--                              tree's spend only when it has some)
--   tool_calls.child_loop_id   the child loop this call started (set in the transaction that
--                              creates the child, so a redelivered call never starts another)
-- No foreign keys: one hot table (loops) per migration, as 0027.

ALTER TABLE loops ADD COLUMN IF NOT EXISTS parent_id uuid;
ALTER TABLE loops ADD COLUMN IF NOT EXISTS parent_tool_call_id bigint;
ALTER TABLE loops ADD COLUMN IF NOT EXISTS depth integer NOT NULL DEFAULT 0;
ALTER TABLE loops ADD COLUMN IF NOT EXISTS child_count integer NOT NULL DEFAULT 0;
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS child_loop_id uuid;

CREATE INDEX IF NOT EXISTS loops_parent ON loops (parent_id, created_at)
    WHERE parent_id IS NOT NULL;

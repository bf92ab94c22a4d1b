"""All SQL lives here: named queries in sql/*.sql wrapped by typed functions per table.

Lock order (every writer, so none can deadlock another; docs/security.md):

1. the loop row, then its tool-call rows, then a concurrency key: a statement that needs a
   call locks its loop first (several loops: in id order), or SKIPs LOCKED both (sweeps);
2. explicit row locks are `FOR NO KEY UPDATE` (no key ever changes), so the foreign-key
   checks of inserts that reference a loop or a call (`FOR KEY SHARE`: jobs, messages,
   events) never wait on them;
3. job rows are only ever locked with SKIP LOCKED (claims, `job_delete_for_loop`): a claim
   holding a job may wait for its loop, and nobody waits for a job.
"""

-- Agent versions (docs/upgrading.md, "Changing an agent under running loops"): every
-- process records the fingerprint of each agent definition it loaded; each loop records
-- the version it runs (and an upgrade asked for, applied at its next turn boundary); each
-- worker lists the versions its process can run (worker_versions), so claims skip the
-- rest. Expand-only: older code never names these columns (an insert by it gets the
-- agent's newest version from a trigger, see the end). One hot table (loops): the worker
-- versions are a table of their own, not columns of `workers` (docs/upgrading.md, "One
-- hot table per migration").
-- Idempotent on re-run.
CREATE TABLE IF NOT EXISTS agent_versions (
    id               text PRIMARY KEY,          -- the fingerprint's first 16 hex digits
    agent            text NOT NULL,
    fingerprint      text NOT NULL,             -- sha256 of (agent, definition), hex
    definition       jsonb NOT NULL,            -- what the fingerprint covers; no secrets
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS agent_versions_agent ON agent_versions (agent, created_at DESC);

ALTER TABLE loops ADD COLUMN IF NOT EXISTS agent_version text;
ALTER TABLE loops ADD COLUMN IF NOT EXISTS upgrade_to text;
ALTER TABLE loops ADD COLUMN IF NOT EXISTS upgrade_by text;  -- who asked (the audit)

-- workers.id -> the agent versions that process can run; no foreign key (it would lock the
-- hot workers table): rows of workers gone are ignored (joined) and pruned at registration.
CREATE TABLE IF NOT EXISTS worker_versions (
    worker_id        uuid PRIMARY KEY,
    agent_versions   text[] NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- The insert trigger that gives a loop made without a version its agent's newest one:
-- agentd/store/sql/functions/agent_versions.sql (functions have one home each).

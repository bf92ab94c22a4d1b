-- Agent versions (docs/upgrading.md, "Changing an agent under running loops"): every
-- process records the fingerprint of each agent definition it loaded; each loop records
-- the version it runs (and an upgrade asked for, applied at its next turn boundary); each
-- worker lists the versions its process can run (worker_versions), so claims skip the
-- rest. Expand-only: older code never names these columns (an insert by it gets the
-- agent's newest version from the trigger below). One hot table (loops): the worker
-- versions are a table of their own, not columns of `workers` (docs/upgrading.md rule 4).
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

-- A loop inserted without a version (a fork of a legacy loop, an older release's API
-- during a rolling upgrade) runs the newest version of its agent known here; none known:
-- NULL, and it waits for a process that registers one (engine/versions.py adopts it).
CREATE OR REPLACE FUNCTION agentd_loop_default_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.agent_version IS NULL THEN
        NEW.agent_version := (SELECT v.id FROM agent_versions v WHERE v.agent = NEW.agent
                              ORDER BY v.created_at DESC, v.id LIMIT 1);
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS loops_default_version ON loops;
CREATE TRIGGER loops_default_version
    BEFORE INSERT ON loops
    FOR EACH ROW
    WHEN (NEW.agent_version IS NULL)
    EXECUTE FUNCTION agentd_loop_default_version();

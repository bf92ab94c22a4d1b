-- Agent versions (migrations/0025, docs/upgrading.md "Changing an agent under running
-- loops").
--
-- A loop inserted without a version (a fork of a legacy loop, an older release's API
-- during a rolling upgrade) runs the newest version of its agent known here; none known:
-- NULL, and it waits for a process that registers one (engine/versions.py adopts it).
CREATE OR REPLACE FUNCTION agentd_loop_default_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.agent_version IS NULL THEN
        NEW.agent_version := (SELECT v.id FROM agent_versions v WHERE v.agent = NEW.agent
                              ORDER BY v.created_at DESC, v.id DESC LIMIT 1);
    END IF;
    RETURN NEW;
END
$$;

-- No WHEN clause: it would name the column at CREATE time, and this file is applied to
-- the schema of any release (the function reads it only when a loop is inserted).
CREATE OR REPLACE TRIGGER loops_default_version
    BEFORE INSERT ON loops
    FOR EACH ROW
    EXECUTE FUNCTION agentd_loop_default_version();

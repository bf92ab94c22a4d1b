-- `loops.state_version` counts changes of `loops.state`: the ETag of PATCH
-- /v1/loops/{id}/state (If-Match). Bumped by the database so no writer can forget it.

CREATE OR REPLACE FUNCTION agentd_bump_state_version() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.state_version := OLD.state_version + 1;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER loops_bump_state_version BEFORE UPDATE OF state ON loops
    FOR EACH ROW WHEN ((old.state IS DISTINCT FROM new.state))
    EXECUTE FUNCTION agentd_bump_state_version();

-- A loop that holds a slot of its concurrency key gives it back when it leaves the running
-- states or is deleted, whatever statement moved it: the key's counter is decremented in
-- the same transaction (lock order: the loop, then the key; docs/security.md).

CREATE OR REPLACE FUNCTION agentd_release_concurrency_slot() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE concurrency_keys SET running = greatest(running - 1, 0), updated_at = now()
        WHERE key = OLD.concurrency_key;
        RETURN OLD;
    END IF;
    IF NEW.status NOT IN ('queued', 'running', 'waiting') THEN
        NEW.concurrency_held := false;
        UPDATE concurrency_keys SET running = greatest(running - 1, 0), updated_at = now()
        WHERE key = OLD.concurrency_key;
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER loops_release_concurrency_slot BEFORE UPDATE OF status ON loops
    FOR EACH ROW WHEN (old.concurrency_held)
    EXECUTE FUNCTION agentd_release_concurrency_slot();

CREATE OR REPLACE TRIGGER loops_release_concurrency_slot_on_delete BEFORE DELETE ON loops
    FOR EACH ROW WHEN (old.concurrency_held)
    EXECUTE FUNCTION agentd_release_concurrency_slot();

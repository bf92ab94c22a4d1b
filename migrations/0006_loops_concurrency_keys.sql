-- Concurrency keys, on the loops table (one hot table per migration: docs/upgrading.md).
-- Expand-only: older code never names these columns; its claims ignore keys (a mixed
-- fleet may exceed a key's limit until the last old worker is gone), and its transitions
-- still release slots because the trigger below does it, not the statements.
--   concurrency_key    loops sharing a key run at most concurrency_limit at once
--   concurrency_limit  that maximum (>= 1), as given when the loop started
--   concurrency_held   the loop holds one of its key's slots: set by the claim that first
--                      runs it, cleared (and the key's counter decremented) by the trigger
--                      when the loop leaves queued/running/waiting or is deleted

ALTER TABLE loops
    ADD COLUMN concurrency_key text,
    ADD COLUMN concurrency_limit integer CHECK (concurrency_limit >= 1),
    ADD COLUMN concurrency_held boolean NOT NULL DEFAULT false;

-- A trigger rather than a clause in each of the dozen statements that end a loop's run
-- (finalize, fail, pause, stop, approvals, the reaper...): every path releases the slot,
-- including paths written later and the previous release's workers.
CREATE FUNCTION agentd_release_concurrency_slot() RETURNS trigger
LANGUAGE plpgsql AS $$
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

CREATE TRIGGER loops_release_concurrency_slot
    BEFORE UPDATE OF status ON loops
    FOR EACH ROW WHEN (OLD.concurrency_held)
    EXECUTE FUNCTION agentd_release_concurrency_slot();

CREATE TRIGGER loops_release_concurrency_slot_on_delete
    BEFORE DELETE ON loops
    FOR EACH ROW WHEN (OLD.concurrency_held)
    EXECUTE FUNCTION agentd_release_concurrency_slot();

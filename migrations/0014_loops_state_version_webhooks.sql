-- Writable loop state and loop webhooks, on the loops table (one hot table per migration).
-- Expand-only: older code never names the column; its writes of `state` still bump the
-- version (the trigger does it, not the statements), so PATCH's If-Match stays sound in a
-- mixed fleet.
--   state_version  incremented on every change of `state`: the ETag of PATCH /v1/loops/{id}/state

ALTER TABLE loops ADD COLUMN state_version bigint NOT NULL DEFAULT 1;

CREATE FUNCTION agentd_bump_state_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.state_version := OLD.state_version + 1;
    RETURN NEW;
END
$$;

CREATE TRIGGER loops_bump_state_version
    BEFORE UPDATE OF state ON loops
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION agentd_bump_state_version();

-- Webhooks for a loop coming to rest: loop.completed / failed / paused / stopped, and
-- loop.budget_exceeded as well when a budget (token, cost, ...) paused it. Status churn
-- (queued, running, waiting) never reaches the function.
CREATE FUNCTION agentd_webhook_on_loop() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_data jsonb;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE enabled) THEN
        RETURN NULL;  -- no webhooks configured: one probe of a small table, nothing built
    END IF;
    v_data := jsonb_build_object(
        'loop_id', NEW.id, 'agent', NEW.agent, 'status', NEW.status,
        'reason', NEW.status_reason, 'error_message', NEW.error_message,
        'subject', NEW.subject, 'title', NEW.title, 'step_count', NEW.step_count);
    PERFORM agentd_webhook_enqueue('loop.' || NEW.status, NEW.id, v_data);
    IF NEW.status = 'paused' AND NEW.status_reason LIKE '%budget_exceeded' THEN
        PERFORM agentd_webhook_enqueue('loop.budget_exceeded', NEW.id, v_data);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER loops_webhook_at_rest
    AFTER UPDATE OF status ON loops
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('completed', 'failed', 'paused', 'stopped'))
    EXECUTE FUNCTION agentd_webhook_on_loop();

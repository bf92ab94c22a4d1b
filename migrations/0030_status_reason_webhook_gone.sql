-- Two expand-only changes: the loop webhooks carry `status_reason`, and endpoints record
-- why agentd disabled one.

-- One name for why a loop is in its status: `status_reason`, as the REST loop resource has
-- always called it. The loop webhooks' `data` carried it as `reason` only; it now carries
-- both (`reason` stays for existing receivers). Expand-only: the trigger function is
-- replaced in place, so a mixed fleet sends the new key as soon as this runs.
CREATE OR REPLACE FUNCTION agentd_webhook_on_loop() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_data jsonb;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE enabled) THEN
        RETURN NULL;  -- no webhooks configured: one probe of a small table, nothing built
    END IF;
    v_data := jsonb_build_object(
        'loop_id', NEW.id, 'agent', NEW.agent, 'status', NEW.status,
        'status_reason', NEW.status_reason, 'reason', NEW.status_reason,
        'error_message', NEW.error_message,
        'subject', NEW.subject, 'title', NEW.title, 'step_count', NEW.step_count);
    PERFORM agentd_webhook_enqueue('loop.' || NEW.status, NEW.id, v_data);
    IF NEW.status = 'paused' AND NEW.status_reason LIKE '%budget_exceeded' THEN
        PERFORM agentd_webhook_enqueue('loop.budget_exceeded', NEW.id, v_data);
    END IF;
    RETURN NULL;
END
$$;

-- Why an endpoint was disabled by agentd itself: 'gone' when it answered 410 Gone (the
-- Standard Webhooks way for a receiver to ask to be switched off). Null otherwise; a
-- worker starting with the endpoint in its `[[webhooks]]` enables it again and clears it.
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS disabled_reason text;

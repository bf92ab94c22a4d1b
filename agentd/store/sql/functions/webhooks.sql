-- One webhook message per event, a delivery per subscribed endpoint, written in the
-- transaction that made the event happen: whatever path changed the row (a statement, a
-- PL/pgSQL function, an older release's code), the delivery commits with it or not at all.
-- No endpoint subscribed: nothing is written.

CREATE OR REPLACE FUNCTION agentd_webhook_enqueue(p_type text, p_loop_id uuid, p_data jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_msg text := 'msg_' || replace(gen_random_uuid()::text, '-', '');
BEGIN
    INSERT INTO webhook_deliveries (endpoint_id, message_id, event_type, loop_id, payload)
    SELECT e.id, v_msg, p_type, p_loop_id,
           jsonb_build_object(
               'type', p_type,
               'timestamp', to_char(clock_timestamp() AT TIME ZONE 'UTC',
                                    'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
               'data', p_data)
    FROM webhook_endpoints e
    WHERE e.enabled AND (p_type = ANY(e.events) OR '*' = ANY(e.events));
    IF FOUND THEN
        PERFORM pg_notify('agentd_jobs', 'webhook');
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION agentd_webhook_on_loop() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

CREATE OR REPLACE TRIGGER loops_webhook_at_rest AFTER UPDATE OF status ON loops
    FOR EACH ROW WHEN (((old.status IS DISTINCT FROM new.status) AND (new.status = ANY (ARRAY['completed'::text, 'failed'::text, 'paused'::text, 'stopped'::text]))))
    EXECUTE FUNCTION agentd_webhook_on_loop();

CREATE OR REPLACE FUNCTION agentd_webhook_on_tool_call() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE enabled) THEN
        RETURN NULL;
    END IF;
    PERFORM agentd_webhook_enqueue(
        'tool_call.awaiting_approval', NEW.loop_id,
        jsonb_build_object('loop_id', NEW.loop_id, 'tool_call_id', NEW.id, 'name', NEW.name,
                           'arguments', NEW.arguments,
                           'approval_deadline', NEW.approval_deadline));
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER tool_calls_webhook_awaiting_approval AFTER UPDATE OF approval_status ON tool_calls
    FOR EACH ROW WHEN (((new.approval_status = 'pending'::text) AND (old.approval_status IS DISTINCT FROM 'pending'::text)))
    EXECUTE FUNCTION agentd_webhook_on_tool_call();

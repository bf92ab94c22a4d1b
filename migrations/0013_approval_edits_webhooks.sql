-- Approve with edited arguments (tool_calls, the one hot table of this migration) and the
-- outbound webhook tables (new). Expand-only: older code never names these columns or
-- tables and reads rows by name; the trigger only writes to the new tables.
--   tool_calls.requested_arguments  what the model asked, kept when a person approved the
--                                   call with different arguments (`arguments` then holds
--                                   the approved ones: what runs and what the model sees)
--   tool_calls.approved_arguments   the arguments a person approved (null: approved as asked)
--   webhook_endpoints               `[[webhooks]]` of the config file, synced at worker start
--                                   (the secret is never stored: only its env var's name)
--   webhook_deliveries              one row per (endpoint, event): the delivery queue, claimed
--                                   with SKIP LOCKED under a lease like a job; message_id is
--                                   the `webhook-id` every attempt of it carries

ALTER TABLE tool_calls
    ADD COLUMN requested_arguments jsonb,
    ADD COLUMN approved_arguments jsonb;

CREATE TABLE webhook_endpoints (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    url              text NOT NULL UNIQUE,
    events           text[] NOT NULL,
    secret_env       text NOT NULL,
    enabled          boolean NOT NULL DEFAULT true,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE webhook_deliveries (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id      bigint NOT NULL REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
    message_id       text NOT NULL,
    event_type       text NOT NULL,
    loop_id          uuid,
    payload          jsonb NOT NULL,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_token      uuid,
    leased_until     timestamptz,
    lease_worker_id  uuid,
    last_status      integer,
    last_error       text,
    last_attempt_at  timestamptz,
    delivered_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (endpoint_id, message_id)
) WITH (fillfactor = 80);

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id)
    WHERE status = 'pending';

-- One message (one webhook-id) per event, a delivery per subscribed endpoint, written in
-- the transaction that made the event happen: whatever path changed the row (a statement,
-- a PL/pgSQL function, an older release's code), the delivery commits with it or not at
-- all. No endpoint subscribed: nothing is written.
CREATE FUNCTION agentd_webhook_enqueue(p_type text, p_loop_id uuid, p_data jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
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

CREATE FUNCTION agentd_webhook_on_tool_call() RETURNS trigger
LANGUAGE plpgsql AS $$
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

CREATE TRIGGER tool_calls_webhook_awaiting_approval
    AFTER UPDATE OF approval_status ON tool_calls
    FOR EACH ROW
    WHEN (NEW.approval_status = 'pending' AND OLD.approval_status IS DISTINCT FROM 'pending')
    EXECUTE FUNCTION agentd_webhook_on_tool_call();

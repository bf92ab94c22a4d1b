-- An `llm.request` event's body is stored as parts shared across the loop's requests
-- (pipeline/wire.py): the trigger moves the parts into wire_parts and keeps references.

CREATE OR REPLACE FUNCTION agentd_wire_parts_store() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO wire_parts AS wp (loop_id, key, body)
    SELECT NEW.loop_id, decode(p.key, 'hex'), p.value
    FROM jsonb_each_text(NEW.request_data -> 'parts') AS p
    ORDER BY p.key
    ON CONFLICT (loop_id, key) DO UPDATE SET created_at = now()
        WHERE wp.created_at < now() - interval '1 hour';
    NEW.request_data := NEW.request_data - 'parts';
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER events_wire_parts BEFORE INSERT ON events
    FOR EACH ROW WHEN (((new.request_data ? 'parts'::text) AND (new.loop_id IS NOT NULL)))
    EXECUTE FUNCTION agentd_wire_parts_store();

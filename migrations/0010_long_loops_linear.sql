-- Long loops stay linear (docs/long-loops.md). Expand-only: a new table, new functions, a
-- new overload, and a trigger on events that only acts on rows older code never writes.
--
-- 1. The wire log without the quadratic. A new-form `llm.request` event stores its body as
--    a reference (request_data.body_ref: a manifest key, the SHA-256 of the bytes sent) to
--    content-addressed parts of its loop: pieces of the body and manifests listing them
--    (pipeline/wire.py). The event row carries the parts its writer did not know stored
--    (request_data.parts); the trigger moves them here, so every statement that inserts
--    events (including the plpgsql finishers) stores them without knowing about them.
--    Older code writes request_data.body (the whole payload) and no parts: untouched.
CREATE TABLE wire_parts (
    loop_id    uuid NOT NULL REFERENCES loops(id) ON DELETE CASCADE,
    key        bytea NOT NULL,  -- the first 16 bytes of the SHA-256 of body
    body       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (loop_id, key)
);
-- The janitor: a loop's parts go once its newest is past the wire-log retention.
CREATE INDEX wire_parts_loop_created ON wire_parts (loop_id, created_at);
CREATE INDEX wire_parts_created ON wire_parts (created_at);

-- A part stored again (a writer without the hint) is touched, so a janitor pass deleting
-- an idle loop's old parts skips it (its DELETE re-checks created_at on the new version).
CREATE FUNCTION agentd_wire_parts_store() RETURNS trigger
LANGUAGE plpgsql AS $$
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

CREATE TRIGGER events_wire_parts BEFORE INSERT ON events
    FOR EACH ROW WHEN (NEW.request_data ? 'parts' AND NEW.loop_id IS NOT NULL)
    EXECUTE FUNCTION agentd_wire_parts_store();

-- 2. A chained turn reads only what is new. The worker that ran the loop's previous turn
--    holds its transcript (engine/history_cache.py) and passes the last message id it
--    holds; it does so only when the loop is still on the generation of that turn, i.e.
--    no lifecycle action (regenerate, pause, edit...) rotated it since, so the rows it
--    holds are unchanged and everything new has a larger id. p_after NULL: a full read,
--    exactly agentd_turn_prefetch. after_id says which one it was (NULL: full).
CREATE FUNCTION agentd_turn_prefetch_after(p_loop_id uuid, p_after bigint)
RETURNS TABLE (history json, history_calls json, tools jsonb, sessions jsonb,
               backoffs jsonb, after_id bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_after IS NULL THEN
        RETURN QUERY SELECT pf.history, pf.history_calls, pf.tools, pf.sessions, pf.backoffs,
            NULL::bigint
        FROM agentd_turn_prefetch(p_loop_id) pf;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT pm.rows, pc.rows, pt.rows, ps.rows, pb.rows, p_after
    FROM (
        SELECT coalesce(json_agg(m ORDER BY m.id), '[]'::json) AS rows,
               array_agg(m.id) AS ids,
               array_agg(m.tool_call_id) FILTER (WHERE m.tool_call_id IS NOT NULL) AS call_ids
        FROM messages m
        WHERE m.loop_id = p_loop_id AND m.id > p_after
          AND NOT m.hidden AND m.superseded_at IS NULL
    ) pm
    CROSS JOIN LATERAL (
        SELECT coalesce(json_agg(t ORDER BY t.message_id, t.position), '[]'::json) AS rows
        FROM tool_calls t
        WHERE t.loop_id = p_loop_id AND (t.message_id = ANY(pm.ids) OR t.id = ANY(pm.call_ids))
    ) pc
    CROSS JOIN LATERAL (
        SELECT coalesce(jsonb_agg(to_jsonb(t) || jsonb_build_object(
                   'mcp_name', ms.mcp_name, 'session_id', ms.session_id,
                   'transport_kind', ms.transport_kind,
                   'task_support', ms.metadata -> 'taskTools' ->> t.remote_name) ORDER BY t.id),
               '[]'::jsonb) AS rows
        FROM mcp_tools t JOIN mcp_sessions ms ON ms.id = t.mcp_session_id
        WHERE t.loop_id = p_loop_id
    ) pt
    CROSS JOIN LATERAL (
        SELECT coalesce(jsonb_agg(to_jsonb(ms) ORDER BY ms.id), '[]'::jsonb) AS rows
        FROM mcp_sessions ms WHERE ms.loop_id = p_loop_id
    ) ps
    CROSS JOIN LATERAL (
        SELECT coalesce(jsonb_object_agg(pv.id, pv.blocked_until), '{}'::jsonb) AS rows
        FROM provider_state pv WHERE pv.blocked_until > clock_timestamp()
    ) pb;
END
$$;

-- The end of a tool call (0008, 0009), chaining with a delta read: p_chain_after is the
-- chained turn's p_after above.
CREATE FUNCTION agentd_tool_call_finish(
    p_id bigint, p_loop_id uuid, p_lease_token uuid, p_generation uuid,
    p_checkpoint boolean, p_result text, p_structured jsonb, p_is_success boolean,
    p_error_message text, p_duration double precision,
    p_sequential boolean, p_new_token uuid, p_status_reason text,
    p_llm_lease double precision, p_tool_lease double precision,
    p_notify_llm boolean, p_notify_tool boolean,
    e_loop_ids uuid[], e_names text[], e_reasons text[], e_methods text[], e_urls text[],
    e_statuses int[], e_requests jsonb[], e_responses jsonb[], e_durations float8[],
    e_logs text[], e_tool_call_ids bigint[], e_message_ids bigint[], e_inbound_ids bigint[],
    e_attach boolean[], p_chain_worker uuid, p_chain_after bigint
) RETURNS TABLE (outcome text, message_id bigint, tool_jobs int, llm_jobs int,
                 executed_at timestamptz, chained_loop json, prefetch_messages json,
                 prefetch_tool_calls json, prefetch_mcp_tools jsonb,
                 prefetch_mcp_sessions jsonb, prefetch_backoffs jsonb,
                 prefetch_after bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    lp loops%ROWTYPE;
    tc tool_calls%ROWTYPE;
    v_msg bigint;
    v_next record;
    v_tool_jobs int := 0;
    v_llm_jobs int := 0;
    v_chained boolean := false;
BEGIN
    SELECT * INTO lp FROM loops WHERE id = p_loop_id FOR UPDATE;
    IF NOT FOUND OR lp.execution_token IS DISTINCT FROM p_generation
       OR lp.status NOT IN ('running', 'waiting') THEN
        RETURN QUERY SELECT 'fence_lost'::text, NULL::bigint, 0, 0, NULL::timestamptz,
            NULL::json, NULL::json, NULL::json, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::bigint;
        RETURN;
    END IF;
    SELECT * INTO tc FROM tool_calls WHERE id = p_id FOR UPDATE;
    IF NOT FOUND OR tc.lease_token IS DISTINCT FROM p_lease_token
       OR tc.response_message_id IS NOT NULL
       OR (p_checkpoint AND tc.executed_at IS NOT NULL)
       OR EXISTS (SELECT 1 FROM messages WHERE tool_call_id = p_id AND role = 'tool') THEN
        RETURN QUERY SELECT 'fence_lost'::text, NULL::bigint, 0, 0, NULL::timestamptz,
            NULL::json, NULL::json, NULL::json, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::bigint;
        RETURN;
    END IF;
    IF p_checkpoint THEN
        UPDATE tool_calls
        SET result = p_result, structured_result = p_structured, is_success = p_is_success,
            error_message = p_error_message, duration = p_duration, executed_at = now(),
            status = CASE WHEN p_is_success THEN 'completed' ELSE 'failed' END,
            updated_at = now()
        WHERE id = p_id
        RETURNING * INTO tc;
    END IF;
    INSERT INTO messages (loop_id, role, content, tool_call_id, metadata)
    VALUES (p_loop_id, 'tool', coalesce(tc.result, ''), p_id,
            jsonb_build_object('is_success', tc.is_success, 'tool_name', tc.name))
    RETURNING id INTO v_msg;
    UPDATE tool_calls
    SET response_message_id = v_msg, lease_token = NULL, leased_until = NULL,
        lease_worker_id = NULL, updated_at = now()
    WHERE id = p_id;
    -- A fresh snapshot: every sibling answered before this call got the loop lock.
    SELECT t.id, t.approval_status INTO v_next FROM tool_calls t
    WHERE t.loop_id = p_loop_id AND t.response_message_id IS NULL
    ORDER BY t.message_id, t.position LIMIT 1;
    IF FOUND THEN
        IF p_sequential AND v_next.approval_status IS DISTINCT FROM 'pending' THEN
            INSERT INTO jobs (queue, kind, loop_id, tool_call_id, generation, lease_seconds)
            VALUES ('tool', 'tool_call', p_loop_id, v_next.id, p_generation, p_tool_lease);
            v_tool_jobs := 1;
            IF p_notify_tool THEN
                PERFORM pg_notify('agentd_jobs', 'tool');
            END IF;
        END IF;
    ELSIF p_chain_worker IS NOT NULL AND NOT lp.frozen
          AND (lp.concurrency_key IS NULL OR lp.concurrency_limit IS NULL) THEN
        UPDATE loops
        SET status = 'running', status_reason = 'claimed', error_message = NULL,
            execution_token = p_new_token, worker_id = p_chain_worker,
            lease_seconds = coalesce(p_llm_lease, lp.lease_seconds),
            lease_expires_at = now() + make_interval(secs => coalesce(p_llm_lease,
                                                                       lp.lease_seconds)),
            turn_started_at = now(), concurrency_held = false, updated_at = now()
        WHERE id = p_loop_id
        RETURNING * INTO lp;
        v_chained := true;
    ELSE
        UPDATE loops
        SET status = 'queued', status_reason = p_status_reason, error_message = NULL,
            execution_token = p_new_token, lease_expires_at = NULL, worker_id = NULL,
            updated_at = now()
        WHERE id = p_loop_id;
        INSERT INTO jobs (queue, kind, loop_id, generation, lease_seconds)
        VALUES ('llm', 'llm_turn', p_loop_id, p_new_token, p_llm_lease);
        v_llm_jobs := 1;
        IF p_notify_llm THEN
            PERFORM pg_notify('agentd_jobs', 'llm');
        END IF;
    END IF;
    INSERT INTO events (loop_id, name, reason, http_method, url, status, request_data,
                        response_data, duration, log, tool_call_id, message_id,
                        inbound_session_id)
    SELECT x.loop_id, x.name, x.reason, x.method, x.url, x.status, x.req, x.resp, x.dur,
           x.log, x.tcid, CASE WHEN x.att THEN v_msg ELSE x.mid END, x.iid
    FROM unnest(e_loop_ids, e_names, e_reasons, e_methods, e_urls, e_statuses, e_requests,
                e_responses, e_durations, e_logs, e_tool_call_ids, e_message_ids,
                e_inbound_ids, e_attach)
         AS x(loop_id, name, reason, method, url, status, req, resp, dur, log, tcid, mid,
              iid, att);
    IF lp.observed THEN
        PERFORM pg_notify('agentd_stream', jsonb_build_object(
            'type', 'message', 'loop_id', p_loop_id::text, 'message_id', v_msg,
            'role', 'tool', 'tool_call_id', p_id)::text);
        IF v_llm_jobs > 0 OR v_chained THEN
            PERFORM pg_notify('agentd_stream', jsonb_build_object(
                'type', 'status', 'loop_id', p_loop_id::text,
                'status', CASE WHEN v_chained THEN 'running' ELSE 'queued' END)::text);
        END IF;
    END IF;
    IF v_chained THEN
        RETURN QUERY SELECT 'ok'::text, v_msg, v_tool_jobs, v_llm_jobs, tc.executed_at,
            to_json(lp), pf.history, pf.history_calls, pf.tools, pf.sessions, pf.backoffs,
            pf.after_id
        FROM agentd_turn_prefetch_after(p_loop_id, p_chain_after) pf;
        RETURN;
    END IF;
    RETURN QUERY SELECT 'ok'::text, v_msg, v_tool_jobs, v_llm_jobs, tc.executed_at,
        NULL::json, NULL::json, NULL::json, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::bigint;
END
$$;

-- The 0009 signature: the same, with a full read.
CREATE OR REPLACE FUNCTION agentd_tool_call_finish(
    p_id bigint, p_loop_id uuid, p_lease_token uuid, p_generation uuid,
    p_checkpoint boolean, p_result text, p_structured jsonb, p_is_success boolean,
    p_error_message text, p_duration double precision,
    p_sequential boolean, p_new_token uuid, p_status_reason text,
    p_llm_lease double precision, p_tool_lease double precision,
    p_notify_llm boolean, p_notify_tool boolean,
    e_loop_ids uuid[], e_names text[], e_reasons text[], e_methods text[], e_urls text[],
    e_statuses int[], e_requests jsonb[], e_responses jsonb[], e_durations float8[],
    e_logs text[], e_tool_call_ids bigint[], e_message_ids bigint[], e_inbound_ids bigint[],
    e_attach boolean[], p_chain_worker uuid
) RETURNS TABLE (outcome text, message_id bigint, tool_jobs int, llm_jobs int,
                 executed_at timestamptz, chained_loop json, prefetch_messages json,
                 prefetch_tool_calls json, prefetch_mcp_tools jsonb,
                 prefetch_mcp_sessions jsonb, prefetch_backoffs jsonb)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN QUERY SELECT f.outcome, f.message_id, f.tool_jobs, f.llm_jobs, f.executed_at,
        f.chained_loop, f.prefetch_messages, f.prefetch_tool_calls, f.prefetch_mcp_tools,
        f.prefetch_mcp_sessions, f.prefetch_backoffs
    FROM agentd_tool_call_finish(
        p_id, p_loop_id, p_lease_token, p_generation, p_checkpoint, p_result, p_structured,
        p_is_success, p_error_message, p_duration, p_sequential, p_new_token,
        p_status_reason, p_llm_lease, p_tool_lease, p_notify_llm, p_notify_tool,
        e_loop_ids, e_names, e_reasons, e_methods, e_urls, e_statuses, e_requests,
        e_responses, e_durations, e_logs, e_tool_call_ids, e_message_ids, e_inbound_ids,
        e_attach, p_chain_worker, NULL::bigint) f;
END
$$;

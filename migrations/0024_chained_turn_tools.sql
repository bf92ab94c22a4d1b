-- A chained turn whose worker holds the loop's MCP tools does not read them again: a turn
-- over shared MCP sessions (`session = "process"`) reads its tools and sessions from its
-- previous turn on the same worker, where nothing can have changed them (their session ids
-- are the process's, not the rows'). Until now every chained delta read carried them (about
-- a third of its bytes in bench B11). Expand-only: a new overload of
-- agentd_turn_prefetch_after, two new functions for a discovery's rows, and
-- agentd_tool_call_finish(jsonb) re-implemented with one more optional document field,
-- `chain_tools` (absent: true, what every caller so far gets).

-- p_tools false: tools and sessions come back null (the caller holds them); p_after null
-- reads in full, tools included, whatever p_tools says. The read without them has a body
-- of its own: one body for both, with the tool reads switched off by a flag, measured
-- ~0.08 ms slower per chained turn (the hot path).
CREATE FUNCTION agentd_turn_prefetch_after(p_loop_id uuid, p_after bigint, p_tools boolean)
RETURNS TABLE (history json, history_calls json, tools jsonb, sessions jsonb,
               backoffs jsonb, after_id bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_tools IS NOT FALSE OR p_after IS NULL THEN
        RETURN QUERY SELECT * FROM agentd_turn_prefetch_after(p_loop_id, p_after);
        RETURN;
    END IF;
    RETURN QUERY
    SELECT pm.rows, pc.rows, NULL::jsonb, NULL::jsonb, pb.rows, p_after
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
        SELECT coalesce(jsonb_object_agg(pv.id, pv.blocked_until), '{}'::jsonb) AS rows
        FROM provider_state pv WHERE pv.blocked_until > clock_timestamp()
    ) pb;
END
$$;

-- A discovery's MCP rows for a loop, written one way by both statements that record one
-- (loop_finalize_turn_all for a turn over shared sessions, and mcp_discovery_record
-- through agentd_mcp_discovery_record below): one session per server upserted, the loop's
-- tools replaced (a tool already present by name is updated in place, one no longer
-- advertised is deleted). The caller holds the loop's row lock (the engine's lock order:
-- the loop, then its rows). p_tools null writes nothing.
CREATE FUNCTION agentd_mcp_discovery_write(p_loop_id uuid, p_sessions jsonb, p_tools jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_tools IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO mcp_sessions AS ms (loop_id, mcp_name, session_id, transport_kind, metadata)
    SELECT p_loop_id, x.mcp_name, x.session_id, x.transport_kind, coalesce(x.metadata, '{}')
    FROM jsonb_to_recordset(p_sessions) AS x(mcp_name text, session_id text,
                                             transport_kind text, metadata jsonb)
    ON CONFLICT (loop_id, mcp_name) DO UPDATE
    SET session_id = EXCLUDED.session_id, transport_kind = EXCLUDED.transport_kind,
        metadata = EXCLUDED.metadata, updated_at = now();
    DELETE FROM mcp_tools
    WHERE loop_id = p_loop_id
      AND name <> ALL(ARRAY(SELECT x.name FROM jsonb_to_recordset(p_tools) AS x(name text)));
    INSERT INTO mcp_tools AS mt (loop_id, mcp_session_id, name, remote_name, description,
                                 input_schema, requires_approval)
    SELECT p_loop_id, s.id, x.name, x.remote_name, x.description,
           coalesce(x.input_schema, '{}'), coalesce(x.requires_approval, false)
    FROM jsonb_to_recordset(p_tools) AS x(server text, name text, remote_name text,
                                          description text, input_schema jsonb,
                                          requires_approval bool)
    JOIN mcp_sessions s ON s.loop_id = p_loop_id AND s.mcp_name = x.server
    ON CONFLICT (loop_id, name) DO UPDATE
    SET mcp_session_id = EXCLUDED.mcp_session_id, remote_name = EXCLUDED.remote_name,
        description = EXCLUDED.description, input_schema = EXCLUDED.input_schema,
        requires_approval = EXCLUDED.requires_approval;
END
$$;

-- The write above, then the loop's tools as mcp_tool_list shows them, one jsonb each in
-- id order (the calling statement's own snapshot would not see the rows just written).
CREATE FUNCTION agentd_mcp_discovery_record(p_loop_id uuid, p_sessions jsonb, p_tools jsonb)
RETURNS SETOF jsonb
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM agentd_mcp_discovery_write(p_loop_id, p_sessions, p_tools);
    RETURN QUERY
    SELECT to_jsonb(t) || jsonb_build_object(
               'mcp_name', s.mcp_name, 'session_id', s.session_id,
               'transport_kind', s.transport_kind,
               'task_support', s.metadata -> 'taskTools' ->> t.remote_name)
    FROM mcp_tools t JOIN mcp_sessions s ON s.id = t.mcp_session_id
    WHERE t.loop_id = p_loop_id ORDER BY t.id;
END
$$;

-- As 0022, but for `chain_tools` (the chained turn's read above).
CREATE OR REPLACE FUNCTION agentd_tool_call_finish(p_finish jsonb)
RETURNS TABLE (outcome text, message_id bigint, tool_jobs int, llm_jobs int,
               executed_at timestamptz, chained_loop json, prefetch_messages json,
               prefetch_tool_calls json, prefetch_mcp_tools jsonb,
               prefetch_mcp_sessions jsonb, prefetch_backoffs jsonb,
               prefetch_after bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    f record;
    lp loops%ROWTYPE;
    tc tool_calls%ROWTYPE;
    v_msg bigint;
    v_next record;
    v_tool_jobs int := 0;
    v_llm_jobs int := 0;
    v_chained boolean := false;
    v_executed timestamptz;
BEGIN
    SELECT * INTO f FROM jsonb_to_record(p_finish) AS d(
        id bigint,                    -- the tool call
        loop_id uuid,
        lease_token uuid,             -- fence: this worker's lease on the call
        generation uuid,              -- fence: the loop's execution token
        checkpoint boolean,           -- record the result below (fence: not yet executed)
        result text, structured jsonb, is_success boolean, error_message text,
        duration double precision,
        sequential boolean,           -- enqueue the next unanswered sibling
        new_token uuid,               -- the next turn's generation
        status_reason text,
        llm_lease_seconds double precision,
        tool_lease_seconds double precision,
        notify_llm boolean, notify_tool boolean,
        chain_worker uuid,            -- non-null: claim the next turn for this worker
        chain_after bigint,           -- with it: prefetch only the messages after this id
        chain_tools boolean,          -- false (with chain_after): no MCP tools or sessions
        events jsonb                  -- array, one object per event: see the insert below
    );
    SELECT * INTO lp FROM loops WHERE id = f.loop_id FOR NO KEY UPDATE;
    IF NOT FOUND OR lp.execution_token IS DISTINCT FROM f.generation
       OR lp.status NOT IN ('running', 'waiting') THEN
        RETURN QUERY SELECT 'fence_lost'::text, NULL::bigint, 0, 0, NULL::timestamptz,
            NULL::json, NULL::json, NULL::json, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::bigint;
        RETURN;
    END IF;
    SELECT * INTO tc FROM tool_calls WHERE id = f.id FOR NO KEY UPDATE;
    IF NOT FOUND OR tc.lease_token IS DISTINCT FROM f.lease_token
       OR tc.response_message_id IS NOT NULL
       OR (f.checkpoint AND tc.executed_at IS NOT NULL)
       OR EXISTS (SELECT 1 FROM messages WHERE tool_call_id = f.id AND role = 'tool') THEN
        RETURN QUERY SELECT 'fence_lost'::text, NULL::bigint, 0, 0, NULL::timestamptz,
            NULL::json, NULL::json, NULL::json, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::bigint;
        RETURN;
    END IF;
    -- The result the message carries: the one recorded below (a folded checkpoint), or
    -- the one already stored.
    IF f.checkpoint THEN
        tc.result := f.result;
        tc.is_success := f.is_success;
    END IF;
    INSERT INTO messages (loop_id, role, content, tool_call_id, metadata)
    VALUES (f.loop_id, 'tool', coalesce(tc.result, ''), f.id,
            jsonb_build_object('is_success', tc.is_success, 'tool_name', tc.name))
    RETURNING id INTO v_msg;
    -- ONE new version of the call: the result (with a folded checkpoint) and the response.
    IF f.checkpoint THEN
        UPDATE tool_calls
        SET result = f.result, structured_result = f.structured, is_success = f.is_success,
            error_message = f.error_message, duration = f.duration, executed_at = now(),
            status = CASE WHEN f.is_success THEN 'completed' ELSE 'failed' END,
            response_message_id = v_msg, lease_token = NULL, leased_until = NULL,
            lease_worker_id = NULL, updated_at = now()
        WHERE id = f.id
        RETURNING tool_calls.executed_at INTO v_executed;
        tc.executed_at := v_executed;
    ELSE
        UPDATE tool_calls
        SET response_message_id = v_msg, lease_token = NULL, leased_until = NULL,
            lease_worker_id = NULL, updated_at = now()
        WHERE id = f.id;
    END IF;
    -- A fresh snapshot: every sibling answered before this call got the loop lock.
    SELECT t.id, t.approval_status INTO v_next FROM tool_calls t
    WHERE t.loop_id = f.loop_id AND t.response_message_id IS NULL
    ORDER BY t.message_id, t.position LIMIT 1;
    IF FOUND THEN
        IF f.sequential AND v_next.approval_status IS DISTINCT FROM 'pending' THEN
            INSERT INTO jobs (queue, kind, loop_id, tool_call_id, generation, lease_seconds)
            VALUES ('tool', 'tool_call', f.loop_id, v_next.id, f.generation,
                    f.tool_lease_seconds);
            v_tool_jobs := 1;
            IF f.notify_tool THEN
                PERFORM pg_notify('agentd_jobs', 'tool');
            END IF;
        END IF;
    ELSIF f.chain_worker IS NOT NULL AND NOT lp.frozen
          AND (lp.concurrency_key IS NULL OR lp.concurrency_limit IS NULL) THEN
        UPDATE loops
        SET status = 'running', status_reason = 'claimed', error_message = NULL,
            execution_token = f.new_token, worker_id = f.chain_worker,
            lease_seconds = coalesce(f.llm_lease_seconds, lp.lease_seconds),
            lease_expires_at = now() + make_interval(secs => coalesce(f.llm_lease_seconds,
                                                                       lp.lease_seconds)),
            turn_started_at = now(), concurrency_held = false, updated_at = now()
        WHERE id = f.loop_id
        RETURNING * INTO lp;
        v_chained := true;
    ELSE
        UPDATE loops
        SET status = 'queued', status_reason = f.status_reason, error_message = NULL,
            execution_token = f.new_token, lease_expires_at = NULL, worker_id = NULL,
            updated_at = now()
        WHERE id = f.loop_id;
        INSERT INTO jobs (queue, kind, loop_id, generation, lease_seconds)
        VALUES ('llm', 'llm_turn', f.loop_id, f.new_token, f.llm_lease_seconds);
        v_llm_jobs := 1;
        IF f.notify_llm THEN
            PERFORM pg_notify('agentd_jobs', 'llm');
        END IF;
    END IF;
    INSERT INTO events (loop_id, name, reason, http_method, url, status, request_data,
                        response_data, duration, log, tool_call_id, message_id,
                        inbound_session_id)
    SELECT x.loop_id, x.name, x.reason, x.http_method, x.url, x.status, x.request_data,
           x.response_data, x.duration, x.log, x.tool_call_id,
           CASE WHEN x.attach THEN v_msg ELSE x.message_id END, x.inbound_session_id
    FROM jsonb_to_recordset(f.events) AS x(
        loop_id uuid, name text, reason text, http_method text, url text, status int,
        request_data jsonb, response_data jsonb, duration float8, log text,
        tool_call_id bigint, message_id bigint, inbound_session_id bigint,
        attach boolean                -- gets the tool message's id
    );
    IF lp.observed THEN
        PERFORM pg_notify('agentd_stream', jsonb_build_object(
            'type', 'message', 'loop_id', f.loop_id::text, 'message_id', v_msg,
            'role', 'tool', 'tool_call_id', f.id)::text);
        IF v_llm_jobs > 0 OR v_chained THEN
            PERFORM pg_notify('agentd_stream', jsonb_build_object(
                'type', 'status', 'loop_id', f.loop_id::text,
                'status', CASE WHEN v_chained THEN 'running' ELSE 'queued' END)::text);
        END IF;
    END IF;
    IF v_chained THEN
        RETURN QUERY SELECT 'ok'::text, v_msg, v_tool_jobs, v_llm_jobs, tc.executed_at,
            to_json(lp), pf.history, pf.history_calls, pf.tools, pf.sessions, pf.backoffs,
            pf.after_id
        FROM agentd_turn_prefetch_after(f.loop_id, f.chain_after,
                                        coalesce(f.chain_tools, true)) pf;
        RETURN;
    END IF;
    RETURN QUERY SELECT 'ok'::text, v_msg, v_tool_jobs, v_llm_jobs, tc.executed_at,
        NULL::json, NULL::json, NULL::json, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::bigint;
END
$$;

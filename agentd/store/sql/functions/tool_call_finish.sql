-- The end of a tool call, from one named document whose fields are declared at the top of
-- the body: the fences (the loop row, then the call, both FOR NO KEY UPDATE), the result
-- message, the call's one new row version, the successor jobs, the events it carries and,
-- when it resolves the turn's last call, the loop's next LLM turn handed straight to the
-- caller's worker (a chained turn, with its context read by agentd_turn_prefetch_after).
-- agentd_tool_call_finish_many writes several ends in one statement (engine/finish_batch.py),
-- each through the one-call function, in loop-id order so two batches lock loops alike.

CREATE OR REPLACE FUNCTION agentd_tool_call_finish(p_finish jsonb) RETURNS TABLE(outcome text, message_id bigint, tool_jobs integer, llm_jobs integer, executed_at timestamp with time zone, chained_loop json, prefetch_messages json, prefetch_tool_calls json, prefetch_mcp_tools jsonb, prefetch_mcp_sessions jsonb, prefetch_backoffs jsonb, prefetch_after bigint)
    LANGUAGE plpgsql
    AS $$
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

CREATE OR REPLACE FUNCTION agentd_tool_call_finish_many(p_finishes jsonb) RETURNS TABLE(idx integer, outcome text, message_id bigint, tool_jobs integer, llm_jobs integer, executed_at timestamp with time zone, chained_loop json, prefetch_messages json, prefetch_tool_calls json, prefetch_mcp_tools jsonb, prefetch_mcp_sessions jsonb, prefetch_backoffs jsonb, prefetch_after bigint)
    LANGUAGE plpgsql
    AS $$
DECLARE
    d record;
BEGIN
    FOR d IN
        SELECT e.value AS doc, (e.ordinality - 1)::int AS i
        FROM jsonb_array_elements(p_finishes) WITH ORDINALITY AS e
        ORDER BY e.value->>'loop_id', e.ordinality
    LOOP
        RETURN QUERY SELECT d.i, f.* FROM agentd_tool_call_finish(d.doc) AS f;
    END LOOP;
END
$$;

-- One lock order: the end of a tool call takes its loop, then its call, as before, but with
-- FOR NO KEY UPDATE (agentd never changes a key): the foreign-key checks of inserts that
-- reference the loop or the call (jobs, messages, events: FOR KEY SHARE) no longer wait on
-- these locks, so a writer holding a call can no longer deadlock against this function
-- holding the call's loop. This re-implements the newest overload (0010's, with
-- p_chain_after) with the same signature, protocol and behaviour for every caller
-- (docs/upgrading.md rule 2); the older signatures delegate to it (0009, 0010) and keep
-- doing so. See docs/security.md for the lock order.
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
    SELECT * INTO lp FROM loops WHERE id = p_loop_id FOR NO KEY UPDATE;
    IF NOT FOUND OR lp.execution_token IS DISTINCT FROM p_generation
       OR lp.status NOT IN ('running', 'waiting') THEN
        RETURN QUERY SELECT 'fence_lost'::text, NULL::bigint, 0, 0, NULL::timestamptz,
            NULL::json, NULL::json, NULL::json, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::bigint;
        RETURN;
    END IF;
    SELECT * INTO tc FROM tool_calls WHERE id = p_id FOR NO KEY UPDATE;
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

-- What a claimed turn reads, in one call: the latest compaction summary and the visible
-- messages after its coverage, their tool calls, the loop's MCP tools (with their session's
-- fields) and sessions, and the provider keys inside a Retry-After back-off. History rows
-- travel as json (built as text, about half the cost of jsonb). PL/pgSQL so each backend
-- plans these statements once.
-- agentd_turn_prefetch_after reads only what is newer than p_after, for a chained turn whose
-- worker holds the transcript (engine/history_cache.py); p_after null reads in full. With
-- p_tools false it leaves out tools and sessions (the worker holds them: shared sessions).
-- That variant has a body of its own: one body with a flag measured ~0.08 ms slower.

CREATE OR REPLACE FUNCTION agentd_turn_prefetch(p_loop_id uuid) RETURNS TABLE(history json, history_calls json, tools jsonb, sessions jsonb, backoffs jsonb)
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_summary bigint;
    v_through bigint;
BEGIN
    SELECT sm.id, sm.summary_through INTO v_summary, v_through FROM messages sm
    WHERE sm.loop_id = p_loop_id AND NOT sm.hidden AND sm.superseded_at IS NULL
      AND sm.summary_through IS NOT NULL
    ORDER BY sm.id DESC LIMIT 1;
    RETURN QUERY
    SELECT pm.rows, pc.rows, pt.rows, ps.rows, pb.rows
    FROM (
        SELECT coalesce(json_agg(m ORDER BY m.id), '[]'::json) AS rows,
               array_agg(m.id) AS ids,
               array_agg(m.tool_call_id) FILTER (WHERE m.tool_call_id IS NOT NULL) AS call_ids
        FROM messages m
        WHERE m.loop_id = p_loop_id AND NOT m.hidden AND m.superseded_at IS NULL
          AND (m.id = v_summary
               OR (m.summary_through IS NULL AND m.id > coalesce(v_through, 0)))
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

CREATE OR REPLACE FUNCTION agentd_turn_prefetch_after(p_loop_id uuid, p_after bigint) RETURNS TABLE(history json, history_calls json, tools jsonb, sessions jsonb, backoffs jsonb, after_id bigint)
    LANGUAGE plpgsql STABLE
    AS $$
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

CREATE OR REPLACE FUNCTION agentd_turn_prefetch_after(p_loop_id uuid, p_after bigint, p_tools boolean) RETURNS TABLE(history json, history_calls json, tools jsonb, sessions jsonb, backoffs jsonb, after_id bigint)
    LANGUAGE plpgsql STABLE
    AS $$
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

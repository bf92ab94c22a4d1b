-- A discovery's MCP sessions and tools for a loop. agentd_mcp_discovery_write is the one
-- writer (mcp_discovery_record and the finalize of a turn over shared sessions both use
-- it); agentd_mcp_discovery_record also reads the rows back for the turn.

CREATE OR REPLACE FUNCTION agentd_mcp_discovery_write(p_loop_id uuid, p_sessions jsonb, p_tools jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

CREATE OR REPLACE FUNCTION agentd_mcp_discovery_record(p_loop_id uuid, p_sessions jsonb, p_tools jsonb) RETURNS SETOF jsonb
    LANGUAGE plpgsql
    AS $$
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

-- Tool calls that end while another end is being written are written together: one
-- statement and one commit for several `agentd_tool_call_finish` documents
-- (engine/finish_batch.py). Each is the one-call function as it is (same fences, writes and
-- returned columns), called in loop-id order so that two batches lock their loops in the
-- same order; `idx` gives each row back to its document. Expand-only: a new function.
CREATE OR REPLACE FUNCTION agentd_tool_call_finish_many(p_finishes jsonb)
RETURNS TABLE (idx int, outcome text, message_id bigint, tool_jobs int, llm_jobs int,
               executed_at timestamptz, chained_loop json, prefetch_messages json,
               prefetch_tool_calls json, prefetch_mcp_tools jsonb,
               prefetch_mcp_sessions jsonb, prefetch_backoffs jsonb,
               prefetch_after bigint)
LANGUAGE plpgsql VOLATILE AS $$
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

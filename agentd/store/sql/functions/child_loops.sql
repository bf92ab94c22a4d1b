-- A child loop's end resumes its parent (docs/agents.md, "Child loops"). When a child
-- reaches a final status — completed, failed, stopped, or paused by one of its own limits —
-- the parent's tool call that started it is handed back to the tool queue, in the
-- transaction that wrote the child's status, whatever statement wrote it (a finalize, a
-- stop, the reaper). The job runs the call again; it reads the child's outcome and records
-- it as the call's result through the usual fenced finish, so it is recorded once.
-- Nothing is enqueued when the call is already answered (a detached child, or a child
-- continued after its first end) or when the parent is not live (paused, stopped, frozen:
-- its resume re-dispatches the call). The parent's row is read, never locked: the lock
-- order is parent before child (the cascades), and a job enqueued on a generation that a
-- concurrent pause revokes is dropped by its claim. Each end is also written as a
-- `loop.child_finished` event of the parent and announced on its stream.

CREATE OR REPLACE FUNCTION agentd_child_loop_settled() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    p loops%ROWTYPE;
    v_call bigint;
BEGIN
    IF NEW.parent_id IS NULL THEN
        RETURN NULL;  -- a top-level loop (checked here, not in WHEN: the trigger is created
                      -- before the migration that adds the column when upgrading step by step)
    END IF;
    IF NEW.status = 'paused' AND NEW.status_reason IS DISTINCT FROM 'max_steps_exceeded'
       AND NEW.status_reason IS DISTINCT FROM 'token_budget_exceeded'
       AND NEW.status_reason IS DISTINCT FROM 'cost_budget_exceeded' THEN
        RETURN NULL;  -- paused by a person or with its parent: not an end
    END IF;
    SELECT * INTO p FROM loops WHERE id = NEW.parent_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT t.id INTO v_call FROM tool_calls t
    WHERE t.id = NEW.parent_tool_call_id AND t.child_loop_id = NEW.id
      AND t.response_message_id IS NULL AND t.executed_at IS NULL;
    IF FOUND AND p.status IN ('running', 'waiting') AND NOT p.frozen
       AND p.execution_token IS NOT NULL THEN
        INSERT INTO jobs (queue, kind, loop_id, tool_call_id, generation)
        VALUES ('tool', 'tool_call', p.id, v_call, p.execution_token);
        PERFORM pg_notify('agentd_jobs', 'tool');
    END IF;
    INSERT INTO events (loop_id, tool_call_id, name, reason, log)
    VALUES (p.id, NEW.parent_tool_call_id, 'loop.child_finished', NEW.status,
            jsonb_build_object('child_id', NEW.id, 'agent', NEW.agent, 'status', NEW.status,
                               'status_reason', NEW.status_reason)::text);
    PERFORM pg_notify('agentd_stream', jsonb_build_object(
        'type', 'child', 'loop_id', p.id, 'child_id', NEW.id, 'agent', NEW.agent,
        'status', NEW.status, 'tool_call_id', NEW.parent_tool_call_id)::text);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER loops_child_settled AFTER UPDATE OF status ON loops
    FOR EACH ROW WHEN ((old.status IS DISTINCT FROM new.status)
        AND (new.status = ANY (ARRAY['completed'::text, 'failed'::text, 'stopped'::text, 'paused'::text])))
    EXECUTE FUNCTION agentd_child_loop_settled();

-- The tokens and cost a loop and all its descendants spent (a parent's budget check).
CREATE OR REPLACE FUNCTION agentd_loop_tree_spend(p_loop_id uuid) RETURNS TABLE(tokens bigint, cost numeric)
    LANGUAGE sql STABLE
    AS $$
    WITH RECURSIVE tree AS (
        SELECT id, tokens_prompt + tokens_completion AS tokens, cost, 0 AS depth
        FROM loops WHERE id = p_loop_id
        UNION ALL
        SELECT c.id, c.tokens_prompt + c.tokens_completion, c.cost, tree.depth + 1
        FROM loops c JOIN tree ON c.parent_id = tree.id
        WHERE tree.depth < 64
    )
    SELECT coalesce(sum(tokens), 0)::bigint, sum(cost) FROM tree
$$;

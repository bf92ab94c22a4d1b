"""Child loops: a tool call to an agent tool starts a child loop and waits for its end.

First run of the call: the child is started (its first turn enqueued), linked to the parent
(`parent_id`, `parent_tool_call_id`) and recorded on the call (`child_loop_id`), and the call
parks — lease dropped, no job, no worker slot — all in one transaction under the parent's
row lock and this call's lease. A detached call keeps its lease and answers "started child
loop <id>" at once. The child's end (completed, failed, stopped, or paused by its own
limit) enqueues the call again in the transaction that wrote it (the trigger in
store/sql/functions/child_loops.sql); that run reads the outcome and returns it as the
result, which ToolExecution records through the usual fenced finish.
Guarantee: one child per call, whatever crashes or redeliveries happen (a redelivered call
finds `child_loop_id` and waits on that child); the result is recorded once (the lease and
finish fences); a child never spends more than its parent's budget had left, counting what
its running siblings may still spend (docs/agents.md, "Child loops").
Tolerates: a worker killed at any point (the call is redelivered or the child's end re-runs
it; the reaper re-enqueues a parked call whose child ended without a job left for it); a
child ending while its call is being re-parked (the child row is locked after the parent's,
so the park sees the end or the end's job sees the parked call).
Never: holds a connection while waiting; locks a child before its parent.
Called by: pipeline.tool.tool_execution.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from agentd import agent_tools, logs
from agentd.agent import Agent, LoopView
from agentd.db.pool import Connection, connection, transaction
from agentd.engine import loop_limits
from agentd.engine.context import ToolContext
from agentd.errors import AgentdError, FenceLost
from agentd.event_names import EventName
from agentd.states import LoopStatus, ToolCallOutcome, TransitionReason
from agentd.store import events, loops, messages, tool_calls
from agentd.store.models import Loop, NewEvent

log = logs.get("agentd.children")

#: What ToolExecution records: (result text, success, structured result, MCP session id).
Result = tuple[str, bool, Any, str | None]
#: Limit keys a child's state never takes from its parent or from the model.
LIMIT_KEYS = ("max_steps", "max_tokens_total", "max_cost")
#: A child paused for one of these ended (its parent's call gets an error result).
LIMIT_REASONS = frozenset(
    {
        TransitionReason.MAX_STEPS,
        TransitionReason.TOKEN_BUDGET,
        TransitionReason.COST_BUDGET,
    }
)


def ended(child: Loop) -> bool:
    """Has the child reached an end its parent's call resumes on?"""
    if child.status in (LoopStatus.COMPLETED, LoopStatus.FAILED, LoopStatus.STOPPED):
        return True
    return child.status == LoopStatus.PAUSED and child.status_reason in LIMIT_REASONS


async def call(ctx: ToolContext) -> Result | None:
    """Run an agent-tool call: its result, or None once it is parked on its child."""
    tc = ctx.tool_call
    assert ctx.agent is not None and ctx.loop is not None
    spec = agent_tools.by_name(getattr(type(ctx.agent), "_agent_tools", ()), tc.name)
    if spec is None:
        gone = f"Tool {tc.name} is no longer available (the agent no longer declares it)."
        return gone, False, None, None
    if tc.child_loop_id is not None:
        return await _after_start(ctx, spec)
    args = tc.arguments or {}
    message, state = args.get("message"), args.get("state")
    if not isinstance(message, str) or not message.strip():
        return f"Tool {tc.name} needs a non-empty `message` string: the task.", False, None, None
    if state is not None and not isinstance(state, dict):
        return f"Tool {tc.name}: `state` must be a JSON object.", False, None, None
    try:
        return await _start(ctx, spec, message, state or {})
    except FenceLost:
        raise
    except AgentdError as exc:  # an unknown agent, a bad state: nothing was written
        return f"Tool {tc.name} could not start the {spec.agent} agent: {exc}", False, None, None


async def _start(
    ctx: ToolContext, spec: agent_tools.AgentTool, message: str, given: dict[str, Any]
) -> Result | None:
    from agentd.engine.lifecycle import Lifecycle  # the lifecycle imports the engine's kin

    tc, rt = ctx.tool_call, ctx.runtime
    assert ctx.agent is not None
    async with transaction(rt.pool) as conn:
        parent = await ctx.locked_loop(conn)
        if parent.depth + 1 > rt.settings.max_child_depth:
            return (
                f"Tool {tc.name} refused: child loops may nest {rt.settings.max_child_depth} "
                "deep, and this loop is at that depth. Do the task yourself.",
                False,
                None,
                None,
            )
        inherited = {k: v for k, v in (parent.state or {}).items() if k not in LIMIT_KEYS}
        given = {k: v for k, v in given.items() if k not in LIMIT_KEYS}
        # The child's own agent, as it will see its loop: its own budgets cap it too.
        own = rt.registry.instantiate(
            spec.agent, LoopView(subject=parent.subject, state={**inherited, **given})
        )
        limits = await child_limits(conn, ctx.agent, parent, own)
        if limits is None:
            return (
                f"Tool {tc.name} refused: this loop's token or cost budget has nothing left "
                "for a child loop.",
                False,
                None,
                None,
            )
        lifecycle = Lifecycle(rt.pool, rt.registry, rt.settings)
        child = await lifecycle.start_in(
            conn,
            agent=spec.agent,
            message=message,
            subject=parent.subject,
            state={**inherited, **given, **limits},
            title=f"{tc.name} of {parent.title or str(parent.id)[:8]}",
        )
        child = await loops.set_parent(
            conn,
            loop_id=child.id,
            parent_id=parent.id,
            parent_tool_call_id=tc.id,
            depth=parent.depth + 1,
        )
        await loops.count_child(conn, loop_id=parent.id)
        linked = await tool_calls.link_child(
            conn,
            tool_call_id=tc.id,
            lease_token=ctx.lease_token,
            child_loop_id=child.id,
            park=not spec.detach,
        )
        if linked is None:
            raise FenceLost()
        detail = {"child_id": str(child.id), "agent": spec.agent, "detach": spec.detach}
        await events.insert_many(
            conn,
            [
                *ctx.events,
                NewEvent(
                    name=EventName.LOOP_CHILD_STARTED,
                    loop_id=parent.id,
                    tool_call_id=tc.id,
                    reason=TransitionReason.STARTED,
                    log=_json(detail),
                ),
            ],
        )
        await events.publish(
            conn,
            {"type": "child", "loop_id": str(parent.id), "status": "started", **detail},
        )
    ctx.events = []
    log.info(EventName.LOOP_CHILD_STARTED, loop_id=str(parent.id), child_id=str(child.id))
    if spec.detach:
        return _started(spec, child), True, None, None
    ctx.tool_call = linked
    ctx.held = True
    ctx.runtime.telemetry.tool_call_outcome(ctx, ToolCallOutcome.AWAITING_TASK)
    return None


async def _after_start(ctx: ToolContext, spec: agent_tools.AgentTool) -> Result | None:
    """A call whose child exists: its outcome, or parked again until the child ends."""
    tc = ctx.tool_call
    assert tc.child_loop_id is not None
    async with transaction(ctx.runtime.pool) as conn:
        await ctx.locked_loop(conn)
        # Locked after the parent (the lock order): a child ending concurrently has either
        # committed (seen here) or will see the parked call and enqueue it.
        child = await loops.get_for_update(conn, loop_id=tc.child_loop_id)
        if child is None:
            return f"Tool {tc.name} failed: its child loop was deleted.", False, None, None
        if spec.detach:
            return _started(spec, child), True, None, None
        if not ended(child):
            parked = await tool_calls.link_child(
                conn,
                tool_call_id=tc.id,
                lease_token=ctx.lease_token,
                child_loop_id=child.id,
                park=True,
            )
            if parked is None:
                raise FenceLost()
            ctx.tool_call = parked
            ctx.held = True
            ctx.runtime.telemetry.tool_call_outcome(ctx, ToolCallOutcome.AWAITING_TASK)
            return None
        answer = await messages.final_answer(conn, loop_id=child.id)
    return outcome(spec.agent, child, answer)


def outcome(agent: str, child: Loop, answer: str | None) -> Result:
    """The parent's tool result for a child that ended: its answer, or an error to act on."""
    who = f"The {agent} agent (child loop {child.id})"
    if child.status == LoopStatus.COMPLETED:
        return answer or f"{who} finished without an answer.", True, None, None
    if child.status == LoopStatus.FAILED:
        why = child.error_message or child.status_reason or "no reason given"
        return (
            f"{who} failed: {why}. Retry with a clearer task, or go on without it.",
            False,
            None,
            None,
        )
    if child.status == LoopStatus.STOPPED:
        return f"{who} was stopped before it finished.", False, None, None
    limit = child.error_message or child.status_reason
    return f"{who} stopped at its limit ({limit}) before it finished.", False, None, None


def _started(spec: agent_tools.AgentTool, child: Loop) -> str:
    return f"started child loop {child.id} ({spec.agent}); it runs on its own."


def _json(value: dict[str, Any]) -> str:
    import json

    return json.dumps(value)


# --- budgets ------------------------------------------------------------------------------


async def child_limits(
    conn: Connection, agent: Agent, parent: Loop, child: Agent | None = None
) -> dict[str, Any] | None:
    """The state keys that cap a new child: for each budget the parent has, the smaller of
    what the parent has left (counting the tree's spend and what running children may still
    spend) and the child agent's own; None: the parent has nothing left."""
    token_limit = loop_limits.token_budget(agent, parent)
    cost_limit = loop_limits.cost_budget(agent, parent)
    if token_limit is None and cost_limit is None:
        return {}  # nothing to share: the child keeps its own budgets, if any
    tokens, cost = await loops.tree_spend(conn, loop_id=parent.id)
    spent_cost = cost or Decimal(0)
    for sibling in await loops.list_children(conn, parent_id=parent.id):
        if ended(sibling):
            continue
        s_tokens, s_cost = await loops.tree_spend(conn, loop_id=sibling.id)
        own_tokens = loop_limits.token_budget(None, sibling)
        if own_tokens is not None:
            tokens += max(0, own_tokens - s_tokens)
        own_cost = loop_limits.cost_budget(None, sibling)
        if own_cost is not None:
            spent_cost += max(Decimal(0), own_cost - (s_cost or Decimal(0)))
    # The child's state limit replaces its agent's (loop_limits), so the smaller goes in it.
    out: dict[str, Any] = {}
    if token_limit is not None:
        if token_limit - tokens <= 0:
            return None
        left = token_limit - tokens
        mine = loop_limits.agent_token_budget(child)
        out["max_tokens_total"] = left if mine is None else min(left, mine)
    if cost_limit is not None:
        if cost_limit - spent_cost <= 0:
            return None
        left_cost = cost_limit - spent_cost
        mine_cost = loop_limits.agent_cost_budget(child)
        capped = left_cost if mine_cost is None else min(left_cost, mine_cost)
        out["max_cost"] = format(capped.normalize(), "f")
    return out


async def with_tree_spend(pool: Any, agent: Agent, loop: Loop) -> Loop:
    """The loop as its budget check sees it: its children's spend counted as its own (only
    a parent with a budget pays the query)."""
    if loop.child_count == 0 or (
        loop_limits.token_budget(agent, loop) is None
        and loop_limits.cost_budget(agent, loop) is None
    ):
        return loop
    async with connection(pool) as conn:
        tokens, cost = await loops.tree_spend(conn, loop_id=loop.id)
    return loop.replace(tokens_prompt=tokens, tokens_completion=0, cost=cost)

"""A claimed turn's start: its version boundary, due steering messages, and its history.

Guarantee: a turn runs on a version this process has (else it goes back to the queue), with
the messages due at its start in its history, and with its whole transcript (a delta
prefetch merged with what the worker holds, or read in full).
Tolerates: a pending upgrade or steering racing the turn (the fence decides; a lost fence
writes nothing), an evicted history cache (read again).
Never: holds a pooled connection beyond one read or one fenced write.
Called by: engine.worker (Worker._run_turn).
"""

from __future__ import annotations

import dataclasses

from agentd import logs
from agentd.db.pool import Connection, connection, transaction
from agentd.engine import dispatch, steering, versions
from agentd.engine.context import TurnContext
from agentd.engine.history_cache import HistoryCache
from agentd.engine.runtime import Runtime
from agentd.states import JobQueue
from agentd.store import jobs, loops, mcp, messages, tool_calls
from agentd.store.models import Loop

_turn_log = logs.get("agentd.turn")


async def version_boundary(runtime: Runtime, loop: Loop) -> Loop | None:
    """A turn about to start is a turn boundary: apply the loop's pending upgrade when
    this process has the target version. None: this process cannot run the version
    the turn must run on (a chained turn whose upgrade was asked for meanwhile), and
    the turn went back to the queue for a worker that can."""
    assert loop.execution_token is not None
    target = loop.upgrade_to or loop.agent_version
    if target is not None and not runtime.registry.can_run(target):
        lid, token = loop.id, loop.execution_token

        async def back(conn: Connection) -> None:
            await loops.release_leases(conn, ids=[lid], tokens=[token])
            await jobs.notify(conn, queue=JobQueue.LLM)

        dispatch.hand_back(runtime, back, what="turn of another version", loop_id=lid)
        _turn_log.info("turn.version_unavailable", loop_id=str(lid), version=target)
        return None
    if loop.upgrade_to is None or loop.upgrade_to == loop.agent_version:
        return loop
    async with transaction(runtime.pool) as conn:
        done = await versions.apply_upgrade(
            conn, loop_id=loop.id, execution_token=loop.execution_token
        )
    if done is None:  # the fence moved on: the turn's own writes will find it too
        return loop
    _turn_log.info("loop.upgraded", **done)
    return dataclasses.replace(loop, agent_version=loop.upgrade_to, upgrade_to=None)


async def steer(runtime: Runtime, history: HistoryCache, ctx: TurnContext) -> bool:
    """Messages sent to the loop that are due at this turn's start join its history
    (engine/steering.py); False: the turn lost its fence, so it writes nothing."""
    n = await steering.apply_due(
        runtime.pool, loop_id=ctx.loop.id, execution_token=ctx.execution_token
    )
    if n is None:
        _turn_log.info("turn.fence_lost", at="steering")
        return False
    if n:
        _turn_log.info("turn.steered", messages=n)
        if ctx.prefetch is not None:  # read before they were applied: read again
            async with connection(runtime.pool) as conn:
                rows = await messages.list_(conn, loop_id=ctx.loop.id)
                calls = await tool_calls.list_for_loop(conn, loop_id=ctx.loop.id)
            pre = dataclasses.replace(ctx.prefetch, messages=rows, tool_calls=calls, after=None)
            ctx.prefetch = await whole_history(runtime, history, ctx.loop, pre)
    return True


async def whole_history(
    runtime: Runtime, history: HistoryCache, loop: Loop, pre: jobs.TurnPrefetch
) -> jobs.TurnPrefetch:
    """A delta prefetch merged with the transcript held (read in full if it is gone);
    what the turn's prompt is built from is then held for the next chained turn."""
    assert loop.execution_token is not None
    rows, calls = pre.messages, pre.tool_calls
    if pre.tools_omitted:  # the read left them out: this worker said it holds them
        held = history.held_tools(loop.id)
        if held is None:  # gone since (evicted): read them
            async with connection(runtime.pool) as conn:
                sessions = await mcp.list_sessions(conn, loop_id=loop.id)
                tools = await mcp.list_tools(conn, loop_id=loop.id)
        else:
            tools, sessions = held
        pre = dataclasses.replace(pre, mcp_tools=tools, mcp_sessions=sessions, tools_omitted=False)
    if pre.after is not None:
        merged = history.merge(loop.id, pre.after, rows, calls)
        if merged is None:
            async with connection(runtime.pool) as conn:
                rows = await messages.list_(conn, loop_id=loop.id)
                calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
        else:
            rows, calls = merged
        pre = dataclasses.replace(pre, messages=rows, tool_calls=calls, after=None)
    history.record(loop.id, loop.execution_token, rows, calls)
    return dataclasses.replace(pre, rendered=history.rendered(loop.id))

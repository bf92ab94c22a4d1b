"""Waiting on the world: the two ways ToolExecution lets go of a call without a result.

- `park_for_input`: a 2026-07-28 MCP server answered `tools/call` with an
  InputRequiredResult. The request is stored on the call, the call is parked (no lease,
  no job, no worker) and the loop set `waiting`, exactly as ApprovalGate parks; a person
  answers through `Lifecycle.answer_input`, which re-enqueues the call, and the retry
  carries the answers.
- `schedule_task_poll`: the server runs the call as an MCP task. The task is stored on
  the call, the lease dropped, and the next poll enqueued for later in the same statement,
  so the call's lease only ever covers one poll.

Both write the job's pending events in their transaction, fenced by the loop's generation
(loop row first, the engine's lock order) and by this call's lease token.
"""

from __future__ import annotations

from typing import Any

from agentd.db.pool import Connection, transaction
from agentd.engine.context import ToolContext
from agentd.errors import FenceLost
from agentd.states import LoopStatus, ToolCallOutcome, TransitionReason
from agentd.store import events, loops, tool_calls
from agentd.store.models import Loop, NewEvent


async def _fenced_loop(conn: Connection, ctx: ToolContext) -> Loop:
    loop = await loops.get_for_update(conn, loop_id=ctx.tool_call.loop_id)
    if (
        loop is None
        or loop.execution_token != ctx.generation
        or loop.status not in (LoopStatus.RUNNING, LoopStatus.WAITING)
    ):
        raise FenceLost()
    return loop


async def park_for_input(ctx: ToolContext, request: dict[str, Any]) -> None:
    tc = ctx.tool_call
    async with transaction(ctx.runtime.pool) as conn:
        loop = await _fenced_loop(conn, ctx)
        parked = await tool_calls.park_input(
            conn, tool_call_id=tc.id, lease_token=ctx.lease_token, input_request=request
        )
        if parked is None:
            raise FenceLost()
        if loop.status != LoopStatus.WAITING:
            await loops.fenced_transition(
                conn,
                loop_id=loop.id,
                execution_token=ctx.generation,
                from_statuses=[LoopStatus.RUNNING],
                status=LoopStatus.WAITING,
                reason=TransitionReason.AWAITING_INPUT,
                new_token=ctx.generation,
            )
        keys = ", ".join(sorted((request.get("inputRequests") or {}).keys()))
        await events.insert_many(
            conn,
            [
                *ctx.events,
                NewEvent(
                    name="tool_call.awaiting_input",
                    loop_id=tc.loop_id,
                    tool_call_id=tc.id,
                    reason=TransitionReason.AWAITING_INPUT,
                    log=f"round={parked.input_rounds} requests={keys}",
                ),
            ],
        )
        await events.publish(
            conn,
            {
                "type": "status",
                "loop_id": str(tc.loop_id),
                "status": LoopStatus.WAITING,
                "tool_call_id": tc.id,
                "input_required": True,
            },
        )
    ctx.tool_call = parked
    ctx.events = []
    ctx.held = True
    ctx.runtime.telemetry.tool_call_outcome(ctx, ToolCallOutcome.AWAITING_INPUT)


async def schedule_task_poll(
    ctx: ToolContext, *, task_id: str, state: dict[str, Any], delay: float, first: bool
) -> None:
    tc = ctx.tool_call
    async with transaction(ctx.runtime.pool) as conn:
        await _fenced_loop(conn, ctx)
        row = await tool_calls.schedule_task_poll(
            conn,
            tool_call_id=tc.id,
            lease_token=ctx.lease_token,
            task_id=task_id,
            task_state=state,
            generation=ctx.generation,
            delay=delay,
        )
        if row is None:
            raise FenceLost()
        pending = list(ctx.events)
        if first:
            pending.append(
                NewEvent(
                    name="tool_call.task_started",
                    loop_id=tc.loop_id,
                    tool_call_id=tc.id,
                    log=f"task_id={task_id} status={state.get('status')}",
                )
            )
        await events.insert_many(conn, pending)
    ctx.tool_call = row
    ctx.events = []
    ctx.held = True
    ctx.runtime.telemetry.tool_call_outcome(ctx, ToolCallOutcome.AWAITING_TASK)

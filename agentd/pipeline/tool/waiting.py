"""Waiting: the ways a tool call is let go without a result, and the one way to park it.

- `park`: the call waits for a person. The call is parked (no lease, no job, no worker)
  and the loop set `waiting`; the decision or answer (engine/lifecycle.py) re-enqueues it.
  Its two uses: ApprovalGate (the call needs a person's approval) and `park_for_input`.
- `park_for_input`: a 2026-07-28 MCP server answered `tools/call` with an
  InputRequiredResult. The request is stored on the parked call, and the retry after a
  person's answer carries the answers.
- `schedule_task_poll`: the server runs the call as an MCP task. The task is stored on
  the call, the lease dropped, and the next poll enqueued for later in the same statement,
  so the call's lease only ever covers one poll.

Each writes the job's pending events in its transaction, fenced by the loop's generation
(loop row first, the engine's lock order) and by this call's lease token, then holds the
step (`ctx.held`: nothing downstream runs).
Called by: pipeline/tool/approval_gate.py, pipeline/tool/tool_execution.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentd.db.pool import Connection, transaction
from agentd.engine.context import ToolContext
from agentd.errors import FenceLost
from agentd.event_names import EventName
from agentd.states import LoopStatus, ToolCallOutcome, TransitionReason
from agentd.store import events, loops, tool_calls
from agentd.store.models import NewEvent, ToolCall


async def park(
    ctx: ToolContext,
    park_row: Callable[[Connection], Awaitable[ToolCall | None]],
    *,
    event: EventName,
    reason: TransitionReason,
    outcome: ToolCallOutcome,
    log: Callable[[ToolCall], str | None] = lambda row: None,
    status: dict[str, Any] | None = None,
) -> None:
    """Park the call for a person: `park_row` (the store's park, fenced by this call's
    lease) under the loop's row lock, the loop set `waiting` unless it already is, `event`
    (its log from the parked row) with the job's pending events, and a `waiting` status
    published with `status` added. Holds the step."""
    tc = ctx.tool_call
    async with transaction(ctx.runtime.pool) as conn:
        loop = await ctx.locked_loop(conn)
        parked = await park_row(conn)
        if parked is None:
            raise FenceLost()
        if loop.status != LoopStatus.WAITING:
            await loops.fenced_transition(
                conn,
                loop_id=loop.id,
                execution_token=ctx.generation,
                from_statuses=[LoopStatus.RUNNING],
                status=LoopStatus.WAITING,
                reason=reason,
                new_token=ctx.generation,
            )
        await events.insert_many(
            conn,
            [
                *ctx.events,
                NewEvent(
                    name=event,
                    loop_id=tc.loop_id,
                    tool_call_id=tc.id,
                    reason=reason,
                    log=log(parked),
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
                **(status or {}),
            },
        )
    ctx.tool_call = parked
    ctx.events = []
    ctx.held = True
    ctx.runtime.telemetry.tool_call_outcome(ctx, outcome)


async def park_for_input(ctx: ToolContext, request: dict[str, Any]) -> None:
    keys = ", ".join(sorted((request.get("inputRequests") or {}).keys()))
    await park(
        ctx,
        lambda conn: tool_calls.park_input(
            conn, tool_call_id=ctx.tool_call.id, lease_token=ctx.lease_token, input_request=request
        ),
        event=EventName.TOOL_CALL_AWAITING_INPUT,
        reason=TransitionReason.AWAITING_INPUT,
        outcome=ToolCallOutcome.AWAITING_INPUT,
        log=lambda parked: f"round={parked.input_rounds} requests={keys}",
        status={"input_required": True},
    )


async def schedule_task_poll(
    ctx: ToolContext, *, task_id: str, state: dict[str, Any], delay: float, first: bool
) -> None:
    tc = ctx.tool_call
    async with transaction(ctx.runtime.pool) as conn:
        await ctx.locked_loop(conn)
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

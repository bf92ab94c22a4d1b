"""ApprovalGate: parks calls that need a person's decision.

Position: before ToolExecution. A call needs approval when its tool was declared with
`requires_approval` or its advertised name is in the agent's `approval_required`.
Undecided: parks the call (no lease, no worker held) and sets the loop `waiting`, then
returns WITHOUT calling downstream (it holds the step). Approved: continues. Denied or
expired: `skip_execution` with a rejection the model sees. Finalizer: no.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentd.db.pool import transaction
from agentd.engine.context import ToolContext
from agentd.errors import FenceLost
from agentd.mcp import tool_names
from agentd.pipeline.builder import Handler
from agentd.states import ApprovalStatus, LoopStatus, TransitionReason
from agentd.store import events, loops, tool_calls
from agentd.store.models import NewEvent


class ApprovalGate:
    def __init__(self, app: Handler[ToolContext]) -> None:
        self.app = app

    async def __call__(self, ctx: ToolContext) -> None:
        tc = ctx.tool_call
        agent = ctx.agent
        assert agent is not None
        # Compared normalized (mcp/tool_names.py): a case or compatibility variant of a
        # gated name is gated too.
        gated = {tool_names.normalized(n) for n in agent.approval_required or []}
        needs = bool(ctx.tool and ctx.tool.requires_approval) or (
            tool_names.normalized(tc.name) in gated
        )
        status = tc.approval_status
        if tc.executed_at is not None or (not needs and status is None):
            await self.app(ctx)
            return
        if status in (None, ApprovalStatus.PENDING):
            await self._park(ctx)
            return
        if status in (ApprovalStatus.DENIED, ApprovalStatus.EXPIRED):
            why = f": {tc.decision_reason}" if tc.decision_reason else ""
            ctx.skip_execution(
                f"The call to {tc.name} was {status} by a person{why}. It was not run.",
                success=False,
            )
        await self.app(ctx)

    async def _park(self, ctx: ToolContext) -> None:
        tc = ctx.tool_call
        agent = ctx.agent
        assert agent is not None
        deadline = (
            datetime.now(UTC) + timedelta(seconds=agent.approval_timeout)
            if agent.approval_timeout
            else None
        )
        async with transaction(ctx.runtime.pool) as conn:
            loop = await loops.get_for_update(conn, loop_id=tc.loop_id)
            if (
                loop is None
                or loop.execution_token != ctx.generation
                or loop.status not in (LoopStatus.RUNNING, LoopStatus.WAITING)
            ):
                raise FenceLost()
            parked = await tool_calls.park(
                conn, tool_call_id=tc.id, lease_token=ctx.lease_token, deadline=deadline
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
                    reason=TransitionReason.AWAITING_APPROVAL,
                    new_token=ctx.generation,
                )
            await events.insert_many(
                conn,
                [
                    *ctx.events,
                    NewEvent(
                        name="tool_call.awaiting_approval",
                        loop_id=tc.loop_id,
                        tool_call_id=tc.id,
                        reason=TransitionReason.AWAITING_APPROVAL,
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
                },
            )
        ctx.events = []
        ctx.held = True

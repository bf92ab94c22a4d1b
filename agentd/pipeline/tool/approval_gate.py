"""ApprovalGate: parks calls that need a person's decision.

Position: before ToolExecution. A call needs approval when its tool was declared with
`requires_approval` or its advertised name is in the agent's `approval_required`.
Undecided: parks the call (no lease, no worker held) and sets the loop `waiting`
(pipeline/tool/waiting.py, as an MCP input request parks it), then returns WITHOUT calling
downstream (it holds the step). Approved: continues. Denied or expired: `skip_execution`
with a rejection the model sees. Finalizer: no.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentd.engine.context import ToolContext
from agentd.event_names import EventName
from agentd.mcp import tool_names
from agentd.pipeline.builder import Handler
from agentd.pipeline.tool import waiting
from agentd.states import ApprovalStatus, ToolCallOutcome, TransitionReason
from agentd.store import tool_calls


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
        await waiting.park(
            ctx,
            lambda conn: tool_calls.park(
                conn, tool_call_id=tc.id, lease_token=ctx.lease_token, deadline=deadline
            ),
            event=EventName.TOOL_CALL_AWAITING_APPROVAL,
            reason=TransitionReason.AWAITING_APPROVAL,
            outcome=ToolCallOutcome.AWAITING_APPROVAL,
        )

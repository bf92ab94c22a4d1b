"""AgentInitialization: loads the loop, its agent, and the tool the call names.

Position: after ErrorHandling. Writes: ctx.loop, ctx.agent, ctx.tool. Finalizer: no.
Reads nothing when the claim prefetched the loop and the tool (ctx.prefetched).
Never runs a call on another agent version than its loop's (the claim already skips
those): its approval rules and tool names are that version's. Such a call is left
(FenceLost) for the reaper to hand to a worker that has the version.
"""

from __future__ import annotations

from agentd.agent import LoopView
from agentd.db.pool import connection
from agentd.engine.context import ToolContext
from agentd.errors import FenceLost
from agentd.pipeline.builder import Handler
from agentd.store import loops, mcp


class AgentInitialization:
    def __init__(self, app: Handler[ToolContext]) -> None:
        self.app = app

    async def __call__(self, ctx: ToolContext) -> None:
        if ctx.prefetched is not None:  # the claim read them in its own statement
            ctx.loop, ctx.tool = ctx.prefetched
        else:
            async with connection(ctx.runtime.pool) as conn:
                ctx.loop = await loops.get(conn, loop_id=ctx.tool_call.loop_id)
                tools = await mcp.list_tools(conn, loop_id=ctx.tool_call.loop_id)
            if ctx.loop is None:
                raise FenceLost()
            ctx.tool = next((t for t in tools if t.name == ctx.tool_call.name), None)
        view = LoopView(
            id=ctx.loop.id,
            subject=ctx.loop.subject,
            state=ctx.loop.state,
            step_count=ctx.loop.step_count,
        )
        version = ctx.loop.agent_version
        if version is not None and version != ctx.runtime.registry.version_of(ctx.loop.agent):
            raise FenceLost()
        ctx.agent = ctx.runtime.registry.instantiate(ctx.loop.agent, view)
        await self.app(ctx)

"""AgentInitialization: instantiate the loop's agent and put it on the context.

Position: after ErrorHandling; anything before it sees ctx.agent unset.
Reads: ctx.loop. Writes: ctx.agent. Finalizer: no.
"""

from __future__ import annotations

from agentd.engine.context import TurnContext
from agentd.pipeline.builder import Handler


class AgentInitialization:
    def __init__(self, app: Handler[TurnContext]) -> None:
        self.app = app

    async def __call__(self, ctx: TurnContext) -> None:
        ctx.agent = ctx.runtime.registry.instantiate(ctx.loop.agent, ctx.loop_view)
        await self.app(ctx)

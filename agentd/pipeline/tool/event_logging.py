"""EventLogging: on the way back up, writes the call's events if no finalizer did.

Position: after AgentInitialization. Finalizer: no. Writes nothing after a lost fence
or cancellation (ErrorHandling records a failure's events).
"""

from __future__ import annotations

from agentd.db.pool import transaction
from agentd.engine.context import ToolContext
from agentd.pipeline.builder import Handler
from agentd.store import events


class EventLogging:
    def __init__(self, app: Handler[ToolContext]) -> None:
        self.app = app

    async def __call__(self, ctx: ToolContext) -> None:
        await self.app(ctx)
        if ctx.events and not ctx.events_flushed:
            pending, ctx.events = ctx.events, []
            async with transaction(ctx.runtime.pool) as conn:
                await events.insert_many(conn, pending)

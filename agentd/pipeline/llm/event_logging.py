"""EventLogging: on the way back up, writes the turn's events if no finalizer did.

Position: after AgentInitialization. Reads: ctx.events. Writes: events. Finalizer: no.
Settles the wire log's hint (pipeline/wire.py) with whether the turn's events committed.
Never writes after cancellation (a cancelled turn writes nothing).
"""

from __future__ import annotations

from agentd.db.pool import transaction
from agentd.engine.context import TurnContext
from agentd.pipeline.builder import Handler
from agentd.store import events


class EventLogging:
    def __init__(self, app: Handler[TurnContext]) -> None:
        self.app = app

    async def __call__(self, ctx: TurnContext) -> None:
        committed = False
        try:
            await self.app(ctx)
            if ctx.events and not ctx.events_flushed:
                async with transaction(ctx.runtime.pool) as conn:
                    await events.insert_many(conn, ctx.events)
                ctx.events_flushed = True
            committed = ctx.events_flushed
        finally:
            # The wire log's hint learns what this turn stored only once it committed.
            ctx.runtime.wire_hints.settle(ctx.loop.id, ctx.execution_token, committed=committed)

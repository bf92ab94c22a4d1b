"""Deferring a turn: queued again on its generation, due later, its worker slot given back.

Guarantee: one transaction, fenced by the turn's execution token — the loop goes back to
queued with a job due at `run_at`, the turn's unflushed events and the given ones are
written, and an observed loop's watchers get a `queued` status. A lost fence writes nothing.
Called by: pipeline.llm.limits (provider back-off, max_concurrency), pipeline.llm.tool_discovery
(an MCP outage).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from agentd.db.pool import transaction
from agentd.states import LoopStatus
from agentd.store import events, loops
from agentd.store.models import NewEvent

if TYPE_CHECKING:
    from agentd.engine.context import TurnContext


async def defer_turn(
    ctx: TurnContext, run_at: datetime, reason: str, notes: Sequence[NewEvent] = ()
) -> bool:
    """Defer the turn to `run_at`; False when its fence was lost (nothing was written).
    Either way the turn is over here: ctx.finished and ctx.events_flushed are set."""
    async with transaction(ctx.runtime.pool) as conn:
        ok = await loops.defer_turn(
            conn,
            loop_id=ctx.loop.id,
            execution_token=ctx.execution_token,
            run_at=run_at,
            reason=reason,
        )
        if ok:
            pending = [*([] if ctx.events_flushed else ctx.events), *notes]
            if pending:
                await events.insert_many(conn, pending)
            if ctx.loop.observed:
                await events.publish(
                    conn,
                    {
                        "type": "status",
                        "loop_id": str(ctx.loop.id),
                        "status": LoopStatus.QUEUED,
                        "reason": reason,
                    },
                )
    ctx.finished = ctx.events_flushed = True
    return ok

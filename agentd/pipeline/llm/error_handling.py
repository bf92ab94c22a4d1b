"""ErrorHandling: the outermost LLM middleware.

Position: first. Reads: everything. Writes: on failure, the loop (fenced) and events.
Finalizer: no. A lost fence is logged and swallowed; a limit pauses the loop with its
reason; a lost database connection is not the model's failure: the turn is handed back
(fenced) for another attempt, by the LeaseRenewer as soon as the database answers again
(retried until it does, not left to its lease's expiry); any other error fails the loop
with a clear message. Cancellation propagates.
"""

from __future__ import annotations

import asyncio

from agentd import logs
from agentd.db.pool import refused_write, transaction, until_reachable
from agentd.engine.context import TurnContext
from agentd.errors import (
    AgentdError,
    CostBudgetExceeded,
    DatabaseError,
    DatabaseUnavailable,
    FenceLost,
    LimitExceeded,
    MaxDurationExceeded,
    SchemaChanged,
    TokenBudgetExceeded,
)
from agentd.pipeline.builder import Handler
from agentd.pipeline.wire import llm_events
from agentd.states import JobQueue, LoopStatus, TransitionReason, TurnOutcome
from agentd.store import events, jobs, loops, messages
from agentd.store.models import NewEvent

log = logs.get("agentd.turn")
loop_log = logs.get("agentd.loop")


class ErrorHandling:
    def __init__(self, app: Handler[TurnContext]) -> None:
        self.app = app

    async def __call__(self, ctx: TurnContext) -> None:
        try:
            await self.app(ctx)
        except FenceLost:
            ctx.runtime.telemetry.turn_outcome(ctx, TurnOutcome.FENCE_LOST)
            log.info("turn.fence_lost", loop_id=str(ctx.loop.id))
        except asyncio.CancelledError:
            raise
        except LimitExceeded as exc:
            reason = (
                TransitionReason.MAX_DURATION
                if isinstance(exc, MaxDurationExceeded)
                else TransitionReason.TOKEN_BUDGET
                if isinstance(exc, TokenBudgetExceeded)
                else TransitionReason.COST_BUDGET
                if isinstance(exc, CostBudgetExceeded)
                else TransitionReason.MAX_STEPS
            )
            await self._settle(ctx, LoopStatus.PAUSED, reason, exc.message, exc)
        except Exception as exc:
            if isinstance(exc, SchemaChanged):
                # A migration outdated a cached statement mid-transaction: nothing was
                # written, and the pool's cache is already dropped. Run the turn again now.
                ctx.runtime.telemetry.turn_outcome(ctx, TurnOutcome.RETRIED)
                log.info("turn.schema_changed", loop_id=str(ctx.loop.id), error=repr(exc))
                await self._give_back(ctx)
                return
            if isinstance(exc, DatabaseUnavailable):
                # A database blip is not the model's failure: hand the turn back as soon as
                # the database answers, so it does not wait out its lease.
                ctx.runtime.telemetry.turn_outcome(ctx, TurnOutcome.DB_UNAVAILABLE)
                log.warning("turn.db_connection_lost", loop_id=str(ctx.loop.id), error=repr(exc))
                await self._give_back(ctx)
                return
            # A statement the database refused is a bug, like an exception that is not ours.
            if isinstance(exc, AgentdError) and not isinstance(exc, DatabaseError):
                unexpected = False
                message = exc.message
            else:
                unexpected = True
                # the driver's wording (and the text it quotes) is for the log, not for users
                message = refused_write(exc) or (
                    f"{exc.driver}: {exc.message}"
                    if isinstance(exc, DatabaseError)
                    else f"{type(exc).__name__}: {exc}"
                )
            log.warning("turn.failed", loop_id=str(ctx.loop.id), error=message, exc_info=unexpected)
            await self._settle(ctx, LoopStatus.FAILED, TransitionReason.TURN_FAILED, message, exc)

    async def _give_back(self, ctx: TurnContext) -> None:
        renewer = ctx.runtime.renewer
        if renewer is not None:  # retried in the background until the database answers
            renewer.release_turn(ctx.loop.id, ctx.execution_token)
            return

        async def release() -> None:
            async with transaction(ctx.runtime.pool) as conn:
                await loops.release_leases(conn, ids=[ctx.loop.id], tokens=[ctx.execution_token])
                await jobs.notify(conn, queue=JobQueue.LLM)

        error = await until_reachable(release)
        if error is not None:
            log.info("turn.give_back_failed", loop_id=str(ctx.loop.id), error=repr(error))

    async def _settle(
        self,
        ctx: TurnContext,
        status: LoopStatus,
        reason: TransitionReason,
        message: str,
        exc: BaseException,
    ) -> None:
        ctx.error_type = type(exc).__name__  # the turn span's error.type
        wire = llm_events(
            getattr(exc, "exchanges", None) or [], loop_id=ctx.loop.id, hints=ctx.runtime.wire_hints
        )
        async with transaction(ctx.runtime.pool) as conn:
            row = await loops.fenced_transition(
                conn,
                loop_id=ctx.loop.id,
                execution_token=ctx.execution_token,
                from_statuses=[LoopStatus.RUNNING],
                status=status,
                reason=reason,
                error_message=message,
            )
            if row is None:
                ctx.runtime.telemetry.turn_outcome(ctx, TurnOutcome.FENCE_LOST)
                log.info("turn.fence_lost", loop_id=str(ctx.loop.id), while_="failing")
                return
            await messages.fail_shells(conn, loop_id=ctx.loop.id)
            pending = [] if ctx.events_flushed else ctx.events
            await events.insert_many(
                conn,
                [
                    *pending,
                    *wire,
                    NewEvent(
                        name=f"loop.{status}", loop_id=ctx.loop.id, reason=reason, log=message
                    ),
                ],
            )
            await events.publish(
                conn,
                {
                    "type": "status",
                    "loop_id": str(ctx.loop.id),
                    "status": status,
                    "reason": reason,
                    "error": message,
                },
            )
        ctx.events_flushed = True
        ctx.finished = True
        ctx.runtime.telemetry.turn_outcome(ctx, TurnOutcome(status))
        loop_log.info(f"loop.{status}", loop_id=str(ctx.loop.id), reason=reason)

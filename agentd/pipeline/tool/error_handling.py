"""ErrorHandling: the outermost tool middleware.

Position: first. A lost fence is logged and swallowed; cancellation propagates; a lost
database connection is not the tool's failure: the call is handed back (fenced; a checkpointed
result is kept), by the LeaseRenewer as soon as the database answers again (retried until it
does), then re-run with the same idempotency key; any other error marks the call failed
(`is_success` false, `error_message` what failed it, lease dropped; a checkpointed result
is kept) and fails the loop, in one transaction fenced by the generation.
Finalizer: no. Tool failures the model should see never reach here: ToolExecution turns
them into error results.
"""

from __future__ import annotations

import asyncio

from agentd import logs
from agentd.db.pool import transaction, until_reachable
from agentd.engine.context import ToolContext
from agentd.errors import AgentdError, DatabaseError, DatabaseUnavailable, FenceLost
from agentd.pipeline.builder import Handler
from agentd.states import JobQueue, LoopStatus, ToolCallOutcome, TransitionReason
from agentd.store import events, jobs, loops, tool_calls
from agentd.store.models import NewEvent

log = logs.get("agentd.tool_call")


class ErrorHandling:
    def __init__(self, app: Handler[ToolContext]) -> None:
        self.app = app

    async def __call__(self, ctx: ToolContext) -> None:
        tc = ctx.tool_call
        try:
            await self.app(ctx)
        except FenceLost:
            ctx.runtime.telemetry.tool_call_outcome(ctx, ToolCallOutcome.FENCE_LOST)
            log.info("tool_call.fence_lost", tool_call_id=tc.id, loop_id=str(tc.loop_id))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if isinstance(exc, DatabaseUnavailable):  # SchemaChanged included
                # A database blip, or a cached statement a migration outdated, is not the
                # tool's failure: hand the call back so it runs again.
                ctx.runtime.telemetry.tool_call_outcome(ctx, ToolCallOutcome.DB_UNAVAILABLE)
                log.warning(
                    "tool_call.db_connection_lost",
                    tool_call_id=tc.id,
                    loop_id=str(tc.loop_id),
                    error=repr(exc),
                )
                await self._give_back(ctx)
                return
            unexpected = not isinstance(exc, AgentdError) or isinstance(exc, DatabaseError)
            if isinstance(exc, DatabaseError):
                message = f"{exc.driver}: {exc.message}"
            elif isinstance(exc, AgentdError):
                message = exc.message
            else:
                message = f"{type(exc).__name__}: {exc}"
            log.warning(
                "tool_call.failed",
                tool_call_id=tc.id,
                loop_id=str(tc.loop_id),
                error=message,
                exc_info=unexpected,
            )
            text = f"tool call {tc.name} (#{tc.id}) failed: {message}"
            ctx.error_type = type(exc).__name__  # the span's error.type
            async with transaction(ctx.runtime.pool) as conn:
                row = await loops.fenced_transition(
                    conn,
                    loop_id=tc.loop_id,
                    execution_token=ctx.generation,
                    from_statuses=[LoopStatus.RUNNING, LoopStatus.WAITING],
                    status=LoopStatus.FAILED,
                    reason=TransitionReason.TOOL_FAILED,
                    error_message=text,
                )
                if row is None:
                    ctx.runtime.telemetry.tool_call_outcome(ctx, ToolCallOutcome.FENCE_LOST)
                    return
                # Under the loop lock just taken (loop first, then the call).
                await tool_calls.fail(conn, tool_call_id=tc.id, error_message=text)
                await events.insert_many(
                    conn,
                    [
                        *ctx.events,
                        NewEvent(
                            name="loop.failed",
                            loop_id=tc.loop_id,
                            tool_call_id=tc.id,
                            reason=TransitionReason.TOOL_FAILED,
                            log=text,
                        ),
                    ],
                )
                await events.publish(
                    conn,
                    {
                        "type": "status",
                        "loop_id": str(tc.loop_id),
                        "status": LoopStatus.FAILED,
                        "error": text,
                    },
                )
            ctx.runtime.telemetry.tool_call_outcome(ctx, ToolCallOutcome.FAILED)
            logs.get("agentd.loop").info(
                "loop.failed", loop_id=str(tc.loop_id), reason=TransitionReason.TOOL_FAILED
            )

    async def _give_back(self, ctx: ToolContext) -> None:
        tc = ctx.tool_call
        renewer = ctx.runtime.renewer
        if renewer is not None:  # retried in the background until the database answers
            renewer.release_tool(tc.id, ctx.lease_token)
            return

        async def release() -> None:
            async with transaction(ctx.runtime.pool) as conn:
                await tool_calls.release_leases(conn, ids=[tc.id], tokens=[ctx.lease_token])
                await jobs.notify(conn, queue=JobQueue.TOOL)

        error = await until_reachable(release)
        if error is not None:
            log.info("tool_call.give_back_failed", tool_call_id=tc.id, error=repr(error))

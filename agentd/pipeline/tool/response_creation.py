"""ResponseCreation: the tool message, and the turn's continuation.

Position: last. In ONE transaction under the loop's row lock, fenced by the generation and
the call's lease token: inserts the `tool` message (idempotently), marks the call
responded, then sequential: enqueues the next unresolved call in model order; and in both
modes the completion gate — the job that records the last result enqueues the next LLM
turn, so N parallel calls queue it exactly once.
Finalizer: yes — replacing this forfeits the fences.
"""

from __future__ import annotations

import uuid

from agentd.db.pool import transaction
from agentd.engine import dispatch
from agentd.engine.context import ToolContext
from agentd.engine.states import TransitionReason
from agentd.errors import FenceLost
from agentd.pipeline.builder import Handler
from agentd.store import events, loops, messages, tool_calls
from agentd.store.models import NewEvent


class ResponseCreation:
    def __init__(self, app: Handler[ToolContext]) -> None:
        self.app = app

    async def __call__(self, ctx: ToolContext) -> None:
        tc = ctx.tool_call
        runtime = ctx.runtime
        agent = ctx.agent
        assert agent is not None
        woke: list[str] = []
        async with transaction(runtime.pool) as conn:
            loop = await loops.get_for_update(conn, loop_id=tc.loop_id)
            if (
                loop is None
                or loop.execution_token != ctx.generation
                or loop.status not in ("running", "waiting")
            ):
                raise FenceLost()
            msg = await messages.insert_tool_result(
                conn,
                loop_id=tc.loop_id,
                content=tc.result or "",
                tool_call_id=tc.id,
                metadata={"is_success": tc.is_success, "tool_name": tc.name},
            )
            if msg is None:
                raise FenceLost()  # another job already answered this call
            if (
                await tool_calls.mark_responded(
                    conn,
                    tool_call_id=tc.id,
                    response_message_id=msg.id,
                    lease_token=ctx.lease_token,
                )
                is None
            ):
                raise FenceLost()
            unresolved = await tool_calls.list_unresolved(conn, loop_id=tc.loop_id)
            if unresolved and ctx.sequential:
                nxt = unresolved[0]
                if nxt.approval_status != "pending":
                    await dispatch.enqueue_tools(
                        conn,
                        runtime,
                        loop_id=tc.loop_id,
                        generation=ctx.generation,
                        calls=[nxt],
                        lease_seconds=runtime.tool_lease_seconds(),
                    )
                    woke.append("tool")
            elif not unresolved:
                token = uuid.uuid4()
                await loops.fenced_transition(
                    conn,
                    loop_id=loop.id,
                    execution_token=ctx.generation,
                    from_statuses=["running", "waiting"],
                    status="queued",
                    reason=TransitionReason.TOOLS_RESOLVED,
                    new_token=token,
                )
                await dispatch.enqueue_llm(
                    conn,
                    runtime,
                    loop_id=loop.id,
                    generation=token,
                    lease_seconds=runtime.settings.lease_seconds(agent.read_timeout),
                )
                woke.append("llm")
            await events.insert_many(
                conn,
                [
                    *ctx.events,
                    NewEvent(
                        name="tool_call.completed",
                        loop_id=tc.loop_id,
                        tool_call_id=tc.id,
                        message_id=msg.id,
                        reason="replayed" if ctx.metadata.get("replayed") else None,
                        log=f"is_success={tc.is_success}",
                    ),
                ],
            )
            if loop.observed:
                await events.publish(
                    conn,
                    {
                        "type": "message",
                        "loop_id": str(loop.id),
                        "message_id": msg.id,
                        "role": "tool",
                        "tool_call_id": tc.id,
                    },
                )
                if "llm" in woke:
                    await events.publish(
                        conn, {"type": "status", "loop_id": str(loop.id), "status": "queued"}
                    )
        ctx.events = []
        ctx.metadata["events_flushed"] = True
        dispatch.wake(runtime, *woke)
        await self.app(ctx)

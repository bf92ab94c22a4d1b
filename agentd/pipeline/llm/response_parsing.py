"""ResponseParsing: the canonical finalizer of an LLM turn.

Position: last. Reads: ctx.response. Writes, in ONE statement (one round trip, one
commit: store/sql/loops.sql `loop_finalize_turn_all`) fenced by the turn's execution token:
the loop (step, status, tokens: usage, or a flagged chars/4 estimate), the assistant message
(promoting the streaming shell), its tool calls, their jobs (all, or only the first when
sequential), the turn's events and, for an observed loop, the observers' notifications.
Zero rows on the fence: FenceLost, nothing written.
Finalizer: yes — replacing this forfeits the fences.
"""

from __future__ import annotations

import uuid

from agentd.db.pool import connection
from agentd.engine import dispatch, tokens
from agentd.engine.context import TurnContext
from agentd.errors import FenceLost
from agentd.observability import tracing
from agentd.pipeline.builder import Handler
from agentd.store import loops
from agentd.store.models import NewEvent


class ResponseParsing:
    def __init__(self, app: Handler[TurnContext]) -> None:
        self.app = app

    async def __call__(self, ctx: TurnContext) -> None:
        resp = ctx.response
        agent = ctx.agent
        assert resp is not None and agent is not None
        runtime = ctx.runtime
        calls = resp.tool_calls
        used = tokens.of_turn(ctx.request, resp)  # the provider's usage, or an estimate
        sequential = bool(agent.sequential_tool_calls)
        rows = [
            {
                "position": i,
                "provider_call_id": c.id or f"call_{uuid.uuid4().hex[:12]}",
                "name": c.name,
                "arguments": c.arguments,
                "arguments_raw": None if c.arguments is not None else c.raw_arguments,
                # The turn's trace context parents the tool call's span.
                "metadata": {**c.metadata, "sequential": sequential, **tracing.carrier()},
            }
            for i, c in enumerate(calls)
        ]
        turn_event = NewEvent(
            name="turn.completed" if not calls else "turn.tool_calls",
            loop_id=ctx.loop.id,
            reason=resp.finish_reason,
        )  # the statement adds its message id and the {step, tool_calls} log
        async with connection(runtime.pool) as conn:
            done = await loops.finalize_turn_all(
                conn,
                loop_id=ctx.loop.id,
                execution_token=ctx.execution_token,
                tokens=used.triple,
                estimated=used.estimated,
                shell_message_id=ctx.shell_message_id,
                message={
                    "content": resp.content,
                    "reasoning": resp.reasoning,
                    "metadata": resp.metadata,
                    "ttft": resp.ttft,
                    "duration": resp.duration,
                    "finish_reason": resp.finish_reason,
                },
                calls=rows,
                sequential=sequential,
                tool_lease_seconds=runtime.tool_lease_seconds(ctx.metadata.get("mcp_timeouts")),
                notify_tool="tool" not in runtime.consumes,
                turn_events=[*ctx.events, turn_event],
                attach=[False] * len(ctx.events) + [True],
            )
        if done is None:
            raise FenceLost()
        loop = done.loop
        ctx.events_flushed = True
        ctx.finished = True
        ctx.loop = loop
        runtime.telemetry.turn_outcome(ctx, "tool_calls" if calls else "completed")
        if rows:
            dispatch.wake(runtime, "tool")
        await self.app(ctx)

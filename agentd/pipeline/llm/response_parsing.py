"""ResponseParsing: the canonical finalizer of an LLM turn.

Position: last. Reads: ctx.response. Writes, in ONE transaction fenced by the turn's
execution token: the loop (step, status, tokens: usage, or a flagged chars/4 estimate), the
assistant message (promoting the streaming shell), its tool calls, their jobs (all, or only
the first when sequential), and the turn's events. Zero rows on the fence: FenceLost,
nothing written.
Finalizer: yes — replacing this forfeits the fences.
"""

from __future__ import annotations

import json
import uuid

from agentd.db.pool import transaction
from agentd.engine import dispatch, tokens
from agentd.engine.context import TurnContext
from agentd.errors import FenceLost
from agentd.observability import tracing
from agentd.pipeline.builder import Handler
from agentd.store import events, loops, messages, tool_calls
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
        async with transaction(runtime.pool) as conn:
            loop = await loops.finalize_turn(
                conn,
                loop_id=ctx.loop.id,
                execution_token=ctx.execution_token,
                completed=not calls,
                tokens=used.triple,
                estimated=used.estimated,
            )
            if loop is None:
                raise FenceLost()
            msg = None
            fields = dict(
                content=resp.content,
                reasoning=resp.reasoning,
                metadata=resp.metadata,
                tokens=used.triple,
                tokens_estimated=used.estimated,
                ttft=resp.ttft,
                duration=resp.duration,
                finish_reason=resp.finish_reason,
            )
            if ctx.shell_message_id is not None:
                msg = await messages.promote_shell(
                    conn, message_id=ctx.shell_message_id, step=loop.step_count, **fields
                )  # type: ignore[arg-type]
            if msg is None:
                msg = await messages.insert(
                    conn,
                    loop_id=loop.id,
                    role="assistant",
                    step=loop.step_count,
                    execution_token=ctx.execution_token,
                    **fields,
                )  # type: ignore[arg-type]
            rows = []
            if calls:
                rows = await tool_calls.insert_many(
                    conn,
                    loop_id=loop.id,
                    message_id=msg.id,
                    calls=[
                        {
                            "position": i,
                            "provider_call_id": c.id or f"call_{uuid.uuid4().hex[:12]}",
                            "name": c.name,
                            "arguments": c.arguments,
                            "arguments_raw": None if c.arguments is not None else c.raw_arguments,
                            # The turn's trace context parents the tool call's span.
                            "metadata": {
                                **c.metadata,
                                "sequential": sequential,
                                **tracing.carrier(),
                            },
                        }
                        for i, c in enumerate(calls)
                    ],
                )
                lease = runtime.tool_lease_seconds(ctx.metadata.get("mcp_timeouts"))
                await dispatch.enqueue_tools(
                    conn,
                    runtime,
                    loop_id=loop.id,
                    generation=ctx.execution_token,
                    calls=rows[:1] if sequential else rows,
                    lease_seconds=lease,
                )
            ctx.events.append(
                NewEvent(
                    name="turn.completed" if not calls else "turn.tool_calls",
                    loop_id=loop.id,
                    message_id=msg.id,
                    reason=resp.finish_reason,
                    log=json.dumps({"step": loop.step_count, "tool_calls": len(calls)}),
                )
            )
            await events.insert_many(conn, ctx.events)
            if loop.observed:
                await events.publish(
                    conn,
                    {
                        "type": "message",
                        "loop_id": str(loop.id),
                        "message_id": msg.id,
                        "role": "assistant",
                    },
                )
                await events.publish(
                    conn, {"type": "status", "loop_id": str(loop.id), "status": loop.status}
                )
        ctx.events_flushed = True
        ctx.finished = True
        ctx.loop = loop
        runtime.telemetry.turn_outcome(ctx, "tool_calls" if calls else "completed")
        if rows:
            dispatch.wake(runtime, "tool")
        await self.app(ctx)

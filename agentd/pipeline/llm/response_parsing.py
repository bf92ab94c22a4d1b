"""ResponseParsing: the canonical finalizer of an LLM turn.

Position: last. Reads: ctx.response. Writes, in ONE statement (one round trip, one
commit: store/sql/loops.sql `loop_finalize_turn_all`) fenced by the turn's execution token:
the loop (step, status, tokens: usage, or a flagged chars/4 estimate; cost and speed
totals, pipeline/llm/costs.py), the assistant message (promoting the streaming shell), its
tool calls, their jobs (all, or only the first when sequential), the turn's events, the MCP
sessions and tools its discovery left unrecorded (ctx.unrecorded) and, for an observed
loop, the observers' notifications. A turn that would end the run while messages sent to
the loop are pending leaves it queued instead, with its next turn enqueued (the statement
reads the pending count on the row it updates; engine/steering.py). Zero rows on the
fence: FenceLost, nothing written. Chaining (engine/chaining.py): as many calls as the
worker lends tool slots for are inserted leased to it, and returned in ctx.chain.leased for
the worker to run once the stack returns.
Finalizer: yes — replacing this forfeits the fences.
"""

from __future__ import annotations

import uuid
from typing import Any

from agentd import logs
from agentd.db.pool import connection
from agentd.engine import dispatch
from agentd.engine.chaining import LeasedWork
from agentd.engine.context import TurnContext
from agentd.errors import FenceLost, TooManyToolCalls
from agentd.observability import tracing
from agentd.pipeline.builder import Handler
from agentd.pipeline.llm import costs, tokens
from agentd.states import JobQueue, LoopStatus, TransitionReason, TurnOutcome
from agentd.store import jobs, loops
from agentd.store.models import NewEvent

log = logs.get("agentd.loop")


def _tool_call_cap(agent: Any, settings: Any) -> int:
    cap = getattr(agent, "max_tool_calls_per_turn", None)
    if isinstance(cap, int) and not isinstance(cap, bool) and cap >= 1:
        return cap
    return int(settings.max_tool_calls_per_turn)


class ResponseParsing:
    def __init__(self, app: Handler[TurnContext]) -> None:
        self.app = app

    async def __call__(self, ctx: TurnContext) -> None:
        resp = ctx.response
        agent = ctx.agent
        assert resp is not None and agent is not None
        runtime = ctx.runtime
        calls = resp.tool_calls
        cap = _tool_call_cap(agent, runtime.settings)
        if len(calls) > cap:
            # Before anything is written: ErrorHandling fails the loop with this message,
            # and the answer stays out of the transcript (its wire log has it).
            raise TooManyToolCalls(
                f"the model asked for {len(calls)} tool calls in one answer; the limit is "
                f"{cap} (max_tool_calls_per_turn): none was run",
                tool_calls=len(calls),
                limit=cap,
            )
        used = tokens.of_turn(ctx.request, resp)  # the provider's usage, or an estimate
        spent = costs.of_turn(runtime.settings, agent, ctx.request, resp, used)
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
        # No calls: the statement completes the loop, and the fleet feed (GET /v1/events)
        # hears it as it hears failed, paused and stopped loops (chained turns end here too).
        ended = (
            None
            if calls
            else NewEvent(
                name="loop.completed", loop_id=ctx.loop.id, reason=TransitionReason.MODEL_FINISHED
            )
        )
        # Chaining: the calls the worker has free tool slots for (ctx.chain) are leased to
        # it by the finalize itself; the rest are queued for any worker. The worker runs
        # what this returns in ctx.chain.leased once the stack has returned.
        chain = ctx.chain
        own = chain.take(1 if sequential else len(rows)) if chain is not None and rows else 0
        tokens_own = [uuid.uuid4() for _ in range(own)]
        if chain is not None:
            chain.tokens = tokens_own  # handed back if the write raises (it may have committed)
        done = await self._finalize(
            ctx, rows, used, spent, sequential, turn_event, ended, tokens_own
        )
        if done is None:
            if chain is not None:
                chain.leased = LeasedWork()  # the fence held nothing: nothing was written
            raise FenceLost()
        if runtime.renewer is not None:  # committed: the lease ended with it
            runtime.renewer.settle_turn(done.loop.id, ctx.execution_token)
        ctx.unrecorded = None  # recorded with the turn
        loop = done.loop
        ctx.events_flushed = True
        ctx.finished = True
        ctx.loop = loop
        if chain is not None:
            by_name = {t.name: t for t in ctx.tools}
            chain.leased = LeasedWork(
                tools=tuple(
                    jobs.ToolClaim(
                        job_id=0,
                        generation=ctx.execution_token,
                        tool_call=tc,
                        agent=loop.agent,
                        loop=loop,
                        tool=by_name.get(tc.name),
                    )
                    for tc in done.leased_calls
                )
            )
        runtime.telemetry.turn_outcome(
            ctx, TurnOutcome.TOOL_CALLS if calls else TurnOutcome.COMPLETED
        )
        if not calls:
            log.info("loop.completed", loop_id=str(loop.id), steps=loop.step_count)
        if spent.cost is not None:
            runtime.telemetry.llm_cost(agent=loop.agent, model=spent.model, cost=spent.cost)
        if done.jobs_enqueued:
            dispatch.wake(runtime, JobQueue.TOOL)
        if loop.status == LoopStatus.QUEUED:  # steered: messages sent meanwhile continue it
            dispatch.wake(runtime, JobQueue.LLM)
        await self.app(ctx)

    async def _finalize(
        self,
        ctx: TurnContext,
        rows: list[dict[str, Any]],
        used: tokens.TurnTokens,
        spent: costs.TurnCost,
        sequential: bool,
        turn_event: NewEvent,
        ended: NewEvent | None,
        own_tokens: list[uuid.UUID],
    ) -> loops.FinalizedTurn | None:
        runtime = ctx.runtime
        resp = ctx.response
        assert resp is not None
        async with connection(runtime.pool) as conn:
            return await loops.finalize_turn_all(
                conn,
                loop_id=ctx.loop.id,
                execution_token=ctx.execution_token,
                tokens=used.triple,
                estimated=used.estimated,
                shell_message_id=ctx.shell_message_id,
                message={
                    "content": resp.content,
                    "reasoning": resp.reasoning,
                    "metadata": {**resp.metadata, "usage": spent.usage_metadata()},
                    "ttft": resp.ttft,
                    "duration": resp.duration,
                    "finish_reason": resp.finish_reason,
                },
                calls=rows,
                sequential=sequential,
                tool_lease_seconds=runtime.tool_lease_seconds(ctx.mcp_timeouts),
                notify_tool=JobQueue.TOOL not in runtime.consumes,
                turn_events=[*ctx.events, turn_event, *([ended] if ended else [])],
                attach=[False] * len(ctx.events) + [True] + ([False] if ended else []),
                own_tokens=own_tokens,
                worker_id=runtime.worker_id,
                cost=spent.cost,
                tokens_reasoning=spent.tokens_reasoning,
                generation_seconds=spent.generation_seconds,
                discovered=ctx.unrecorded,
            )

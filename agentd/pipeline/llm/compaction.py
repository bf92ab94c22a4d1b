"""Compaction: when the prompt nears the agent's context window, summarise the old history
once, in a turn of its own, and let the next turn resume from [system, summary, tail].

Position: after ToolDiscovery, before NetworkCalling. Reads: ctx.agent, ctx.tool_specs, the
loop's messages. Writes: ctx.history (the prompt, so NetworkCalling does not read the
messages again); on a compaction turn, in ONE transaction fenced by the turn's execution
token: the summary (a `system` messages row whose `summary_through` names the last message
it covers), the loop (back to queued on a new generation, tokens added), the next turn's
job and the events. Zero rows on the fence: FenceLost, nothing written.
Finalizer: yes, for compaction turns — replacing this forfeits the fence on the summary.

Guarantee: one summary per compaction, and every later prompt starts with the same
[system, summary, tail...] prefix (no sliding window: docs/long-loops.md). The original
messages stay on record; only the prompt leaves them out.
Tolerates: a crash or a lost lease mid-summary (the reaper re-queues the turn on a new
generation and it summarises again; the stale worker's summary never commits).
Never: compacts when nothing but the tail would be summarised (so it cannot loop), or
splits an assistant message from its tool results.
"""

from __future__ import annotations

import asyncio
import json
import uuid

from agentd import logs
from agentd.agent import Agent, resolve
from agentd.db.pool import transaction
from agentd.engine import children, dispatch, loop_limits
from agentd.engine.context import TurnContext
from agentd.errors import FenceLost, LLMError, LLMProtocolError, MaxDurationExceeded
from agentd.llm.types import LLMRequest, LLMResponse, Message, ToolSpec
from agentd.pipeline.builder import Handler
from agentd.pipeline.llm import costs, prompt, tokens
from agentd.pipeline.wire import llm_events
from agentd.states import JobQueue
from agentd.store import events, loops, messages
from agentd.store.models import Message as MessageRow
from agentd.store.models import NewEvent, ToolCall

log = logs.get("agentd.turn")


def prompt_size(
    summary: MessageRow | None,
    rows: list[MessageRow],
    history: list[Message],
    tools: list[ToolSpec],
) -> int:
    """Tokens the prompt will take: the last measured request plus what came after it.

    The provider's own count of an earlier request is far better than chars/4, but only a
    request made since the current summary measured this prompt's prefix.
    """
    since = summary.id if summary is not None else 0
    for i in range(len(rows) - 1, -1, -1):
        r = rows[i]
        if (
            r.role == "assistant"
            and r.id > since
            and r.tokens_prompt is not None
            and not r.tokens_estimated
        ):
            after = prompt.render("", None, rows[i + 1 :], [])
            return r.tokens_prompt + (r.tokens_completion or 0) + tokens.estimate_messages(after)
    return tokens.estimate_messages(history, tools)


def needs_compaction(agent: Agent, size: int) -> bool:
    window = agent.context_window
    if not isinstance(window, int) or window <= 0:
        return False
    return size >= window * float(agent.compaction_threshold)


class Compaction:
    def __init__(self, app: Handler[TurnContext]) -> None:
        self.app = app

    async def __call__(self, ctx: TurnContext) -> None:
        agent = ctx.agent
        assert agent is not None
        # At its step limit: NetworkCalling raises it, nothing to compact for.
        if not agent.context_window or loop_limits.at_max_steps(agent, ctx.loop):
            await self.app(ctx)
            return
        rows, calls = await ctx.prompt_inputs()
        memo = getattr(ctx.prefetch, "rendered", None)  # the worker's, as NetworkCalling's
        summary, current = prompt.prompt_rows(rows, memo)
        ctx.history = prompt.render(agent.system_prompt, summary, current, calls, memo=memo)
        size = prompt_size(summary, current, ctx.history, ctx.tool_specs)
        if not needs_compaction(agent, size):
            await self.app(ctx)
            return
        plan = prompt.plan_compaction(rows, int(agent.compaction_keep_tail))
        if plan is None:
            # Only the tail is left: summarising it again would change nothing but the cache.
            log.info("turn.compaction_skipped", loop_id=str(ctx.loop.id), prompt_tokens=size)
            await self.app(ctx)
            return
        # A summary is a model call like any other; a parent's children spend with it.
        spending = await children.with_tree_spend(ctx.runtime.pool, agent, ctx.loop)
        loop_limits.check_token_budget(agent, spending)
        loop_limits.check_cost_budget(agent, spending)
        await self._compact(ctx, plan, calls, size)

    async def _compact(
        self,
        ctx: TurnContext,
        plan: prompt.CompactionPlan,
        calls: list[ToolCall],
        size: int,
    ) -> None:
        agent = ctx.agent
        assert agent is not None
        runtime = ctx.runtime
        # The request extends the prompt the model has been seeing, so its prefix is cached.
        history = prompt.render(agent.system_prompt, plan.summary, plan.old, calls)
        history.append(Message(role="user", content=agent.compaction_prompt))
        ctx.history = history
        ctx.request = LLMRequest(
            provider=await resolve(agent.llm_provider()),
            messages=history,
            tools=ctx.tool_specs,
            stream=False,
            llm_params=dict(agent.llm_params),
            reasoning_effort=agent.reasoning_effort,
            max_tokens=agent.max_tokens,
            reasoning_strategies=agent.reasoning_strategies,
        )
        max_duration = agent.max_duration or runtime.settings.default_max_duration
        try:
            async with asyncio.timeout(max_duration):
                resp = await runtime.llm.complete(ctx.request, dialect=agent.dialect)
        except TimeoutError as exc:
            raise MaxDurationExceeded(
                f"the compaction turn ran longer than max_duration ({max_duration:g}s)"
            ) from exc
        except LLMError as exc:
            ctx.events.extend(
                llm_events(
                    getattr(exc, "exchanges", []), loop_id=ctx.loop.id, hints=ctx.runtime.wire_hints
                )
            )
            exc.exchanges = []  # type: ignore[attr-defined]  # recorded once, above
            raise
        ctx.response = resp
        ctx.events.extend(
            llm_events(
                resp.exchanges,
                loop_id=ctx.loop.id,
                hints=ctx.runtime.wire_hints,
                token=ctx.execution_token,
            )
        )
        text = (resp.content or "").strip()
        if not text:
            raise LLMProtocolError("the compaction turn returned no summary text")
        await self._finalize(ctx, plan, resp, text, size)

    async def _finalize(
        self,
        ctx: TurnContext,
        plan: prompt.CompactionPlan,
        resp: LLMResponse,
        text: str,
        size: int,
    ) -> None:
        runtime = ctx.runtime
        used = tokens.of_turn(ctx.request, resp)
        spent = costs.of_turn(runtime.settings, ctx.agent, ctx.request, resp, used)
        new_token = uuid.uuid4()
        async with transaction(runtime.pool) as conn:
            loop = await loops.finalize_compaction(
                conn,
                loop_id=ctx.loop.id,
                execution_token=ctx.execution_token,
                new_token=new_token,
                tokens=used.triple,
                estimated=used.estimated,
                cost=spent.cost,
                tokens_reasoning=spent.tokens_reasoning,
            )
            if loop is None:
                raise FenceLost()
            msg = await messages.insert(
                conn,
                loop_id=loop.id,
                role="system",
                content=text,
                reasoning=resp.reasoning,
                execution_token=ctx.execution_token,
                metadata={
                    "kind": "summary",
                    "summarised": len(plan.old),
                    "kept": len(plan.tail),
                    "prompt_tokens_before": size,
                    "usage": spent.usage_metadata(),
                },
                tokens=used.triple,
                tokens_estimated=used.estimated,
                ttft=resp.ttft,
                duration=resp.duration,
                finish_reason=resp.finish_reason,
                summary_through=plan.through,
            )
            await dispatch.enqueue_llm(
                conn,
                runtime,
                loop_id=loop.id,
                generation=new_token,
                lease_seconds=ctx.loop.lease_seconds,
            )
            ctx.events.append(
                NewEvent(
                    name="turn.compacted",
                    loop_id=loop.id,
                    message_id=msg.id,
                    reason="compacted",
                    log=json.dumps(
                        {
                            "summary_through": plan.through,
                            "summarised": len(plan.old),
                            "kept": len(plan.tail),
                            "prompt_tokens_before": size,
                        }
                    ),
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
                        "role": "system",
                    },
                )
                await events.publish(
                    conn, {"type": "status", "loop_id": str(loop.id), "status": loop.status}
                )
        log.info(
            "turn.compacted",
            loop_id=str(loop.id),
            summary_through=plan.through,
            summarised=len(plan.old),
            prompt_tokens_before=size,
        )
        ctx.events_flushed = True
        ctx.finished = True
        ctx.loop = loop
        if spent.cost is not None:
            runtime.telemetry.llm_cost(agent=loop.agent, model=spent.model, cost=spent.cost)
        dispatch.wake(runtime, JobQueue.LLM)

"""NetworkCalling: builds the prompt, calls the model, streams into a hidden shell.

Position: after Compaction, before ResponseParsing. Reads: ctx.agent, ctx.tools, ctx.history
(built here from the stored messages unless an earlier middleware built it). Raises the
limits (max_steps, the token and cost budgets) before anything is sent.
Writes: ctx.request, ctx.response, ctx.events; while streaming, a hidden `processing`
assistant shell whose partial content is saved (and published to observers) at
`stream_flush_interval`. Finalizer: no. Holds no DB connection during the model call.
Before calling, the provider key's fleet-wide back-off and limits admit the call or defer
the turn (engine/limits.py): then it returns without calling the next middleware, as it
does when a 429/503 with Retry-After comes back (recorded for every worker first).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from agentd import logs, redact
from agentd.agent import resolve
from agentd.db.pool import connection, transaction
from agentd.engine import children, loop_limits
from agentd.engine.context import TurnContext
from agentd.errors import (
    FenceLost,
    LLMError,
    LLMTransportError,
    MaxDurationExceeded,
    MaxStepsExceeded,
)
from agentd.llm.types import LLMRequest, StreamDelta
from agentd.pipeline.builder import Handler
from agentd.pipeline.llm import deferral, limits, prompt, tool_discovery
from agentd.pipeline.wire import llm_events
from agentd.store import events, messages
from agentd.store.models import NewEvent

log = logs.get("agentd.turn")


#: The deferral's status_reason and event reason while the model endpoint is unreachable.
LLM_UNAVAILABLE = "llm_unavailable"


async def _defer_unreachable(ctx: TurnContext, exc: LLMTransportError) -> None:
    """The model endpoint could not be reached even after the in-turn re-sends
    (llm_retries): the same policy as an MCP server that is down (tool_discovery) — the
    turn is handed back with a growing delay (mcp_discovery_defer_delay doubling up to
    mcp_discovery_defer_max), and a run of failures mcp_discovery_give_up_after long fails
    the loop, naming the URL (in `exc`) and how long it was tried."""
    settings = ctx.runtime.settings
    error = redact.text(exc.message)
    outage = await tool_discovery.outage_of(ctx, LLM_UNAVAILABLE, wire_too=True)
    now = datetime.now(UTC)
    run_at = tool_discovery.defer_until(settings, outage, now)
    if run_at is None:
        waited = (now - (outage.since or now)).total_seconds()
        raise LLMTransportError(
            f"{error} (still failing after {waited:.0f}s of retries; "
            f"mcp_discovery_give_up_after={settings.mcp_discovery_give_up_after:g}s)",
            connected=False,
        ) from exc
    note = NewEvent(
        name="turn.deferred",
        loop_id=ctx.loop.id,
        reason=LLM_UNAVAILABLE,
        log=f"{error}; next attempt at {run_at.isoformat()}",
    )
    if not await deferral.defer_turn(ctx, run_at, LLM_UNAVAILABLE, [note]):
        raise FenceLost()  # paused, stopped or reaped meanwhile: nothing was written
    log.warning(
        "turn.deferred",
        loop_id=str(ctx.loop.id),
        reason=LLM_UNAVAILABLE,
        deferrals=outage.deferrals + 1,
        until=run_at.isoformat(),
        error=error,
    )


class NetworkCalling:
    def __init__(self, app: Handler[TurnContext]) -> None:
        self.app = app

    async def __call__(self, ctx: TurnContext) -> None:
        agent = ctx.agent
        assert agent is not None
        settings = ctx.runtime.settings
        if loop_limits.at_max_steps(agent, ctx.loop):
            limit = loop_limits.max_steps(agent, ctx.loop)
            raise MaxStepsExceeded(f"max_steps ({limit}) reached")
        # A parent's budget counts its child loops' spend too (engine/children.py).
        spending = await children.with_tree_spend(ctx.runtime.pool, agent, ctx.loop)
        loop_limits.check_token_budget(agent, spending)
        loop_limits.check_cost_budget(agent, spending)
        provider = await resolve(agent.llm_provider())
        if not ctx.history:  # Compaction (or a host middleware) may have built it already
            rows, calls = await ctx.prompt_inputs()
            memo = getattr(ctx.prefetch, "rendered", None)  # the worker's, for this loop
            ctx.history = prompt.history(agent.system_prompt, rows, calls, memo=memo)
        ctx.request = LLMRequest(
            provider=provider,
            messages=ctx.history,
            tools=ctx.tool_specs,
            stream=bool(agent.streaming),
            llm_params=dict(agent.llm_params),
            reasoning_effort=agent.reasoning_effort,
            max_tokens=agent.max_tokens,
            reasoning_strategies=agent.reasoning_strategies,
        )
        gate = limits.Gate(ctx, provider)
        if not await gate.admit():
            return  # deferred: the turn is queued again, due when the provider allows
        on_delta = None
        if ctx.request.stream:
            on_delta = await self._open_shell(ctx)
        max_duration = agent.max_duration or settings.default_max_duration
        try:
            async with asyncio.timeout(max_duration):
                ctx.response = await ctx.runtime.llm.complete(
                    ctx.request,
                    dialect=agent.dialect,
                    on_delta=on_delta,
                    throttled=gate.on_throttled,
                )
        except TimeoutError as exc:
            raise MaxDurationExceeded(
                f"the turn ran longer than max_duration ({max_duration:g}s)"
            ) from exc
        except LLMError as exc:
            ctx.runtime.telemetry.llm_attempts(ctx, getattr(exc, "exchanges", []))
            if await gate.deferred_after(exc):
                return  # throttled: every worker waits out the Retry-After, this turn too
            ctx.events.extend(
                llm_events(
                    getattr(exc, "exchanges", []), loop_id=ctx.loop.id, hints=ctx.runtime.wire_hints
                )
            )
            exc.exchanges = []  # type: ignore[attr-defined]  # recorded once, above
            if isinstance(exc, LLMTransportError) and not exc.connected:
                await _defer_unreachable(ctx, exc)
                return  # deferred: the turn is queued again, due after a back-off
            raise
        finally:
            flusher = ctx.runtime.flusher
            if ctx.response is None and ctx.shell_message_id is not None and flusher:
                flusher.discard(ctx.shell_message_id)  # failed or cancelled: stop saving it
        if on_delta is not None:
            await on_delta(None)  # cancel the pending flush task, if any
        ctx.runtime.telemetry.llm_attempts(ctx, ctx.response.exchanges)
        await gate.settle(ctx.response.usage)
        ctx.events.extend(
            llm_events(
                ctx.response.exchanges,
                loop_id=ctx.loop.id,
                hints=ctx.runtime.wire_hints,
                token=ctx.execution_token,
            )
        )
        await self.app(ctx)

    async def _open_shell(
        self, ctx: TurnContext
    ) -> Callable[[StreamDelta | None], Awaitable[None]]:
        runtime = ctx.runtime
        # One fenced statement: outside a transaction it is a cached prepared statement, one
        # round trip, where BEGIN, a fresh prepare (and type introspection) and COMMIT cost
        # a streaming turn's start more than the insert.
        async with connection(runtime.pool) as conn:
            shell = await messages.insert_shell(
                conn,
                loop_id=ctx.loop.id,
                step=ctx.loop.step_count + 1,
                execution_token=ctx.execution_token,
            )
        if shell is None:
            raise FenceLost()  # reaped or rotated before the call: write nothing
        ctx.shell_message_id = shell.id
        flusher = runtime.flusher
        if flusher is not None:
            # One batched statement per tick for all of this process's streams.
            flusher.open(
                shell.id, loop_id=ctx.loop.id, token=ctx.execution_token, observed=ctx.loop.observed
            )

            async def submit(d: StreamDelta | None) -> None:
                if d is None:
                    await flusher.close(shell.id)
                else:
                    flusher.submit(shell.id, d.content, d.reasoning)

            return submit
        content: list[str] = []
        reasoning: list[str] = []
        flushed = 0  # characters saved so far: the next delta's offset
        interval = runtime.settings.stream_flush_interval
        last = 0.0
        observed = ctx.loop.observed

        async def flush() -> None:
            nonlocal last, flushed
            last = time.monotonic()
            # As the flusher shows it: known secrets masked, a possible start held back.
            text = redact.stream_prefix("".join(content), final=False, known=runtime.secrets)
            start, flushed = flushed, len(text)
            async with transaction(runtime.pool) as conn:
                await messages.update_partial(
                    conn,
                    message_id=shell.id,
                    content=text,
                    reasoning=redact.stream_prefix(
                        "".join(reasoning), final=False, known=runtime.secrets
                    )
                    or None,
                    execution_token=ctx.execution_token,
                )
                if observed and len(text) > start:
                    await events.publish_many(
                        conn,
                        events.delta_payloads(
                            loop_id=ctx.loop.id,
                            message_id=shell.id,
                            offset=start,
                            text=text[start:],
                        ),
                    )

        async def on_delta(d: StreamDelta | None) -> None:
            if d is None:
                return
            content.append(d.content)
            if d.reasoning:
                reasoning.append(d.reasoning)
            if time.monotonic() - last >= interval:
                await flush()

        return on_delta

"""The scope of one turn or tool call job: its span, its log context, its metrics.

Entered by the worker around the whole pipeline, so every log line inside carries
`loop_id`, `worker`, `job_id`, the turn's `step` or the `tool_call_id`, and `trace_id` /
`span_id`; the outcome a pipeline noted (or the exception that escaped) is recorded
exactly once on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import structlog

from agentd.observability import metrics, tracing
from agentd.states import ToolCallOutcome, TurnOutcome

if TYPE_CHECKING:
    from agentd.engine.context import ToolContext, TurnContext
    from agentd.observability.metrics import Telemetry

#: agent dialect -> `gen_ai.provider.name`
_PROVIDERS = {"open_ai": "openai", "anthropic": "anthropic", "gemini": "gcp.gemini"}


def _outcome_on_exit(
    ctx: TurnContext | ToolContext,
    exc: BaseException | None,
    fallback: TurnOutcome | ToolCallOutcome,
) -> str:
    # CANCELLED and FAILED are the same words in both vocabularies.
    if isinstance(exc, asyncio.CancelledError):
        return ctx.outcome or TurnOutcome.CANCELLED
    if exc is not None:
        return ctx.outcome or TurnOutcome.FAILED
    return ctx.outcome or fallback


@contextlib.contextmanager
def turn(
    telemetry: Telemetry, ctx: TurnContext, *, worker: str, job_id: int | None
) -> Iterator[None]:
    loop = ctx.loop
    started = time.monotonic()
    loop_id = str(loop.id)
    step = loop.step_count + 1
    attributes = (
        None
        if tracing.off()  # no span to describe: the attributes are not built
        else {
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": loop_id,
            "gen_ai.agent.name": loop.agent,
            "agentd.loop_id": loop_id,
            "agentd.step": step,
            "agentd.worker": worker,
        }
    )
    with tracing.span("chat", client=True, attributes=attributes) as span:
        # structlog's bound_contextvars, without its generator (a few us a job)
        tokens = structlog.contextvars.bind_contextvars(
            loop_id=loop_id,
            worker=worker,
            # A chained turn (claimed by its last tool call's finish) has no job.
            **({"job_id": job_id} if job_id is not None else {"chained": True}),
            step=step,
            **tracing.current_ids(),
        )
        exc: BaseException | None = None
        try:
            yield
        except BaseException as e:
            exc = e
            raise
        finally:
            try:
                resp = ctx.response
                fallback = (
                    (TurnOutcome.TOOL_CALLS if resp.tool_calls else TurnOutcome.COMPLETED)
                    if resp
                    else TurnOutcome.UNKNOWN
                )
                outcome = _outcome_on_exit(ctx, exc, fallback)
                model = metrics.model_of(ctx)
                telemetry.turn_finished(
                    outcome,
                    agent=loop.agent,
                    model=model,
                    seconds=time.monotonic() - started,
                    ttft=resp.ttft if resp else None,
                    usage=resp.usage if resp else None,
                )
                _annotate_turn(span, ctx, model, outcome, exc)
            finally:
                structlog.contextvars.reset_contextvars(**tokens)


def _annotate_turn(
    span: Any, ctx: TurnContext, model: str, outcome: str, exc: BaseException | None
) -> None:
    if not span.is_recording():
        return
    span.update_name(f"chat {model}")
    span.set_attribute("gen_ai.request.model", model)
    span.set_attribute("agentd.outcome", outcome)
    if ctx.agent is not None:
        dialect = getattr(ctx.agent, "dialect", "open_ai")
        span.set_attribute("gen_ai.provider.name", _PROVIDERS.get(dialect, dialect))
    resp = ctx.response
    if resp is not None:
        if resp.model:
            span.set_attribute("gen_ai.response.model", resp.model)
        if resp.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [resp.finish_reason])
        if resp.usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", resp.usage.prompt_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", resp.usage.completion_tokens)
        if resp.ttft is not None:
            span.set_attribute("agentd.ttft_seconds", resp.ttft)
    if outcome in (TurnOutcome.FAILED, TurnOutcome.PAUSED, TurnOutcome.DB_UNAVAILABLE):
        tracing.fail(span, _error_type(ctx.error_type, exc, outcome))


def _error_type(noted: str | None, exc: BaseException | None, outcome: str) -> str:
    """A failed span's `error.type`: the exception's class, whether it escaped or an error
    handler caught it and said so (`ctx.error_type`), else the outcome."""
    if exc is not None:
        return type(exc).__name__
    return noted or outcome


@contextlib.contextmanager
def tool_call(
    telemetry: Telemetry, ctx: ToolContext, *, agent: str | None, worker: str, job_id: int | None
) -> Iterator[None]:
    tc = ctx.tool_call
    started = time.monotonic()
    loop_id = str(tc.loop_id)
    attributes = (
        None
        if tracing.off(tc.metadata)
        else {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tc.name,
            "gen_ai.tool.call.id": tc.provider_call_id,
            "gen_ai.tool.type": "extension",
            "gen_ai.conversation.id": loop_id,
            "gen_ai.agent.name": agent,
            "agentd.loop_id": loop_id,
            "agentd.tool_call_id": tc.id,
            "agentd.worker": worker,
        }
    )
    with tracing.span(f"execute_tool {tc.name}", attributes=attributes, parent=tc.metadata) as span:
        tokens = structlog.contextvars.bind_contextvars(
            loop_id=loop_id,
            worker=worker,
            # A chained call (leased by its turn's finalize) has no job.
            **({"job_id": job_id} if job_id is not None else {"chained": True}),
            tool_call_id=tc.id,
            tool=tc.name,
            **tracing.current_ids(),
        )
        exc: BaseException | None = None
        try:
            yield
        except BaseException as e:
            exc = e
            raise
        finally:
            try:
                held = ToolCallOutcome.AWAITING_APPROVAL if ctx.held else ToolCallOutcome.UNKNOWN
                outcome = _outcome_on_exit(ctx, exc, held)
                telemetry.tool_call_finished(
                    outcome, agent=agent or "unknown", seconds=time.monotonic() - started
                )
                if span.is_recording():
                    span.set_attribute("agentd.outcome", outcome)
                    if outcome in (
                        ToolCallOutcome.ERROR,
                        ToolCallOutcome.FAILED,
                        ToolCallOutcome.DB_UNAVAILABLE,
                    ):
                        tracing.fail(span, _error_type(ctx.error_type, exc, outcome))
            finally:
                structlog.contextvars.reset_contextvars(**tokens)

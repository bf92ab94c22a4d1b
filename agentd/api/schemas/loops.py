"""Loop bodies: start, fork, send, resume, observe; the loop resource and a sent message."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from agentd.api.schemas.base import (
    Bool,
    CleanStr,
    Int,
    JsonObject,
    Money,
    NonBlank,
    Tokens,
    Usd,
    _In,
)
from agentd.llm import prices
from agentd.states import InputMode, LoopInputStatus, LoopStatus
from agentd.store.models import Loop, LoopInput


class StartLoop(_In):
    agent: CleanStr = Field(min_length=1, max_length=200, description="A registered agent name.")
    message: NonBlank = Field(description="The first user message.")
    subject: CleanStr | None = Field(
        None, max_length=1000, description="Who or what the loop is about (the MCP principal)."
    )
    state: JsonObject | None = Field(None, description="A JSON object the agent can read.")
    observe: Bool = Field(
        True,
        description="Publish live deltas from the first turn on, so a client that opens "
        "`/stream` right after starting sees every token (`false`: a turn streams deltas "
        "once someone subscribes).",
    )
    max_tokens_total: Int | None = Field(
        None,
        ge=1,
        le=2**62,
        description="Token budget for this loop (overrides the agent's max_tokens_total; "
        "kept in state). Past it the loop pauses with `token_budget_exceeded`.",
    )
    max_cost: Usd | None = Field(
        None,
        description="Cost budget for this loop in USD (overrides the agent's max_cost; kept "
        "in state). Past it the loop pauses with `cost_budget_exceeded`.",
    )
    concurrency_key: CleanStr | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Loops sharing this key (e.g. a customer id) run at most "
        "`concurrency_limit` at once; the rest wait queued, first started first run. "
        "Overrides the agent's key.",
    )
    concurrency_limit: Int | None = Field(
        None, ge=1, le=1_000_000, description="How many loops of `concurrency_key` may run."
    )

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [{"agent": "support", "message": "Where is my order?", "state": {}}]
        },
    )

    def initial_state(self) -> dict[str, Any] | None:
        """The loop's state: `state` with the budgets given beside it kept in it."""
        out = self.state
        if self.max_tokens_total is not None:
            out = {**(out or {}), "max_tokens_total": self.max_tokens_total}
        if self.max_cost is not None:  # a string in state: JSON numbers are floats to many readers
            out = {**(out or {}), "max_cost": prices.money(self.max_cost)}
        return out


class AtMessage(_In):
    message_id: Int = Field(ge=1, le=2**63 - 1, description="A message of this loop.")


class ForkLoop(AtMessage):
    title: CleanStr | None = Field(None, max_length=1000, description="The new loop's title.")


class AppendMessage(_In):
    content: NonBlank = Field(description="The user message to add before continuing.")
    mode: InputMode | None = Field(
        None,
        description="For a running, waiting or queued loop: `queue` (the default) adds the "
        "message when the run ends and continues with it; `inject` adds it when the next "
        "turn starts (the model sees it on its next call); `interrupt` cancels the turn in "
        "flight and continues with it now. A loop at rest takes it at once, whatever the mode.",
    )


class Resume(_In):
    from_: list[LoopStatus] | None = Field(
        None,
        alias="from",
        description="Statuses the loop may be resumed from (default: init, paused, failed, "
        "stopped). Add `completed` to re-run a finished loop.",
    )
    max_steps: Int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Set this loop's own step limit (kept in its state) before resuming: "
        "a loop paused by max_steps goes on. Must exceed its step_count.",
    )
    max_tokens_total: Int | None = Field(
        None,
        ge=1,
        le=10**12,
        description="Set this loop's own token budget (kept in its state) before resuming. "
        "Must exceed the tokens it has spent.",
    )
    max_cost: Usd | None = Field(
        None,
        description="Set this loop's own cost budget in USD (kept in its state) before "
        "resuming: a loop paused by `cost_budget_exceeded` goes on. Must exceed its cost.",
    )

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)


class Observe(_In):
    observed: Bool = Field(True, description="Publish live deltas and messages for this loop.")


class Speed(BaseModel):
    ttft_total: float = Field(description="Seconds to first token, summed over streamed turns.")
    ttft_turns: int = Field(description="Streamed turns counted in ttft_total.")
    ttft_mean: float | None = Field(description="ttft_total / ttft_turns; null before any.")
    generation_seconds: float = Field(description="Seconds the model spent generating.")
    tps: float | None = Field(
        description="Output tokens per second of generation, over the whole loop."
    )


class ForkedFrom(BaseModel):
    loop_id: UUID | None = Field(description="Null once the source loop is deleted.")
    message_id: int


class Concurrency(BaseModel):
    key: str
    limit: int
    holding: bool = Field(description="The loop holds one of the key's slots.")


class LoopOut(BaseModel):
    id: UUID
    agent: str
    status: LoopStatus
    status_reason: str | None
    step_count: int
    error_message: str | None
    subject: str | None
    title: str | None
    state: dict[str, Any] | None = Field(
        description="The loop's state; null in GET /v1/loops items unless include=state."
    )
    state_version: int = Field(
        1, description="Bumped on every change of `state`; PATCH /state takes it in If-Match."
    )
    frozen: bool
    observed: bool
    tokens: Tokens
    cost: Money | None = Field(
        None,
        description="USD spent on the model (a decimal string), from the price table. Null "
        "until a turn on a model with a known price; see cost_unpriced_turns.",
    )
    cost_unpriced_turns: int = Field(
        0, description="Turns on a model with no known price: not included in `cost`."
    )
    speed: Speed | None = Field(None, description="Time to first token and tokens per second.")
    forked_from: ForkedFrom | None = Field(
        None, description="Set on a fork: the loop and message it was taken at."
    )
    concurrency: Concurrency | None = Field(
        None, description="Set when the loop runs under a concurrency key."
    )
    agent_version: str | None = Field(
        default=None,
        description="The agent version the loop runs (GET /v1/agents lists them); its "
        "approval rules, tool names and limits apply to it.",
    )
    upgrade_to: str | None = Field(
        default=None, description="A version the loop moves to at its next turn boundary."
    )
    waiting_for_version: str | None = Field(
        default=None,
        description="Set (GET /v1/loops/{id} only) while no live worker can run the version "
        "the loop needs next: it waits, and resumes when a worker that has it starts.",
    )
    parent_id: UUID | None = Field(
        None, description="Set on a child loop: the loop whose tool call started it."
    )
    parent_tool_call_id: int | None = Field(
        None, description="Set on a child loop: the parent's tool call that waits for it."
    )
    depth: int = Field(0, description="0 for a root loop, its parent's depth + 1 for a child.")
    child_count: int = Field(0, description="Child loops this loop has started.")
    children: list[UUID] | None = Field(
        None,
        description="The child loops' ids, oldest first (GET /v1/loops/{id} only; null in "
        "list items: GET /v1/loops/{id}/children pages them).",
    )
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, loop: Loop, *, with_state: bool = True) -> LoopOut:
        state = (loop.state if isinstance(loop.state, dict) else {}) if with_state else None
        return cls(
            id=loop.id,
            agent=loop.agent,
            agent_version=loop.agent_version,
            upgrade_to=loop.upgrade_to,
            status=LoopStatus(loop.status),
            status_reason=loop.status_reason,
            step_count=loop.step_count,
            error_message=loop.error_message,
            subject=loop.subject,
            title=loop.title,
            state=state,
            state_version=loop.state_version,
            frozen=loop.frozen,
            observed=loop.observed,
            tokens=Tokens(
                prompt=loop.tokens_prompt,
                completion=loop.tokens_completion,
                cached=loop.tokens_cached,
                reasoning=loop.tokens_reasoning,
                estimated=loop.tokens_estimated,
            ),
            cost=loop.cost,
            cost_unpriced_turns=loop.cost_unpriced_turns,
            speed=Speed(
                ttft_total=loop.ttft_total,
                ttft_turns=loop.ttft_turns,
                ttft_mean=loop.ttft_total / loop.ttft_turns if loop.ttft_turns else None,
                generation_seconds=loop.generation_seconds,
                tps=loop.generation_tokens / loop.generation_seconds
                if loop.generation_seconds > 0
                else None,
            ),
            forked_from=ForkedFrom(
                loop_id=loop.forked_from_loop_id, message_id=loop.forked_from_message_id
            )
            if loop.forked_from_message_id is not None
            else None,
            concurrency=Concurrency(
                key=loop.concurrency_key,
                limit=loop.concurrency_limit or 1,
                holding=loop.concurrency_held,
            )
            if loop.concurrency_key is not None
            else None,
            parent_id=loop.parent_id,
            parent_tool_call_id=loop.parent_tool_call_id,
            depth=loop.depth,
            child_count=loop.child_count,
            children=None,
            created_at=loop.created_at,
            updated_at=loop.updated_at,
        )


class SentMessageOut(BaseModel):
    """A message sent to a loop: pending until a turn boundary makes it `message_id`."""

    id: int
    mode: InputMode
    status: LoopInputStatus
    content: str
    message_id: int | None = Field(
        None, description="The transcript message it became (null while pending)."
    )
    sent_by: str | None
    created_at: datetime
    applied_at: datetime | None

    @classmethod
    def of(cls, i: LoopInput) -> SentMessageOut:
        return cls(
            id=i.id,
            mode=InputMode(i.mode),
            status=LoopInputStatus(i.status),
            content=i.content,
            message_id=i.message_id,
            sent_by=i.sent_by,
            created_at=i.created_at,
            applied_at=i.applied_at,
        )


class SentOut(LoopOut):
    """The loop after a send, and the message sent (`sent`)."""

    sent: SentMessageOut

    @classmethod
    def of_send(cls, loop: Loop, i: LoopInput) -> SentOut:
        return cls(**dict(LoopOut.of(loop)), sent=SentMessageOut.of(i))

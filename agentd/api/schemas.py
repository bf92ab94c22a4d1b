"""Request and response bodies of the REST API (pydantic, so /openapi.json is exact)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Generic, Literal, TypeVar
from uuid import UUID

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, Strict

from agentd.api import hygiene
from agentd.json_types import JSONValue
from agentd.llm import prices
from agentd.states import (
    ApprovalStatus,
    InputMode,
    InputStatus,
    LoopInputStatus,
    LoopStatus,
    MessageStatus,
    ToolCallStatus,
)
from agentd.store.models import Event, Loop, LoopInput, Message, ToolCall

T = TypeVar("T")


# Input cleaning (NUL, lone surrogates, non-finite numbers, deep nesting) lives in
# api/hygiene.py, shared with the admin forms; these names are its pydantic types.
CleanStr = hygiene.CleanStr
NonBlank = hygiene.NonBlank
JsonObject = hygiene.JsonObject
# The former names of the two checks, for callers that validate a body by hand.
_clean_text = hygiene.check_text
_clean_json = hygiene.check_json


def _not_a_number(value: T) -> T:
    # pydantic also reads a number ("0.5") as a unix timestamp; the schema says date-time
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            float(value)
        except ValueError:
            return value
        raise ValueError("must be an ISO 8601 date-time (like 2026-01-31T12:00:00Z)")
    return value


#: A date-time in a query parameter: ISO 8601 text only.
IsoDatetime = Annotated[datetime, BeforeValidator(_not_a_number)]

#: Booleans and integers are strict: `0` is not `false`, `true` is not `1`, `"5"` is not 5.
Bool = Annotated[bool, Strict()]
Int = Annotated[int, Strict()]
#: A cost budget in USD: a number or a decimal string, above 0, finite, at most 1e9.
Usd = Annotated[Decimal, Field(gt=0, le=Decimal("1e9"), allow_inf_nan=False)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


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


class Decision(_In):
    reason: CleanStr | None = Field(None, max_length=10_000, description="Why (recorded).")


class Approval(Decision):
    arguments: JsonObject | None = Field(
        None,
        description="Run the call with these arguments instead of the model's (checked "
        "against the tool's input schema: 422 names the failing path). The model's are kept "
        "as `requested_arguments`.",
    )


class InputAnswerItem(_In):
    action: Literal["accept", "decline", "cancel"]
    content: JsonObject | None = Field(
        None, description="With accept: the answer, matching the request's requested_schema."
    )


class InputAnswer(_In):
    """A person's answer to an MCP server's input request (an elicitation)."""

    action: Literal["accept", "decline", "cancel"] | None = Field(
        None, description="For a call that asked one thing (or to decline/cancel them all)."
    )
    content: JsonObject | None = Field(
        None, description="With accept: the answer, matching the request's requested_schema."
    )
    responses: dict[CleanStr, InputAnswerItem] | None = Field(
        None, description="One answer per request key, when the server asked several things."
    )


# --- responses -------------------------------------------------------------------------


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(
        None, description="Pass back to get the next page; null on the last page."
    )


# Money is an exact decimal; JSON carries it as a string ("0.0125", USD) so no client
# parses it into a float on the way in.
Money = Annotated[Decimal, PlainSerializer(prices.money, return_type=str, when_used="json")]


class Tokens(BaseModel):
    prompt: int
    completion: int
    cached: int
    reasoning: int = Field(0, description="Reasoning tokens: part of `completion`.")
    estimated: bool = Field(
        False, description="Some counts are chars/4 estimates: the provider sent no usage."
    )


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


class ToolCallOut(BaseModel):
    id: int = Field(description="Use with /v1/tool-calls/{id}/approve or /deny.")
    loop_id: UUID
    message_id: int = Field(description="The assistant message that made the call.")
    provider_call_id: str = Field(description="The model's own id for the call.")
    name: str
    arguments: dict[str, Any] | None = Field(description="Null when the model sent invalid JSON.")
    arguments_raw: str | None
    status: ToolCallStatus
    result: str | None
    is_success: bool | None
    error_message: str | None
    approval_required: bool
    approval_status: ApprovalStatus | None = Field(
        description="pending, approved, denied, expired or null."
    )
    approval_deadline: datetime | None
    decided_at: datetime | None
    decided_by: str | None
    decision_reason: str | None
    requested_arguments: JSONValue = Field(
        None,
        description="Set when a person approved other arguments: what the model asked "
        "(`arguments` then holds the approved ones, which ran and which the model sees).",
    )
    approved_arguments: dict[str, Any] | None = Field(
        None, description="The arguments a person approved in place of the model's."
    )
    input_status: InputStatus | None = Field(
        None, description="pending (an MCP server waits for a person's input), answered, or null."
    )
    input_rounds: int = Field(0, description="How many times the server asked for input.")
    task_id: str | None = Field(None, description="The MCP task the server runs the call as.")
    created_at: datetime

    @classmethod
    def of(cls, tc: ToolCall) -> ToolCallOut:
        return cls(
            id=tc.id,
            loop_id=tc.loop_id,
            message_id=tc.message_id,
            provider_call_id=tc.provider_call_id,
            name=tc.name,
            arguments=tc.arguments if isinstance(tc.arguments, dict) else None,
            arguments_raw=tc.arguments_raw,
            status=ToolCallStatus(tc.status),
            result=tc.result,
            is_success=tc.is_success,
            error_message=tc.error_message,
            approval_required=tc.approval_required,
            approval_status=None
            if tc.approval_status is None
            else ApprovalStatus(tc.approval_status),
            approval_deadline=tc.approval_deadline,
            decided_at=tc.decided_at,
            decided_by=tc.decided_by,
            decision_reason=tc.decision_reason,
            requested_arguments=tc.requested_arguments,
            approved_arguments=tc.approved_arguments,
            input_status=None if tc.input_status is None else InputStatus(tc.input_status),
            input_rounds=tc.input_rounds,
            task_id=tc.task_id,
            created_at=tc.created_at,
        )


class InputRequestItem(BaseModel):
    key: str = Field(description="The server's key for this request (see `responses`).")
    method: str | None = Field(description="elicitation/create.")
    mode: str = Field(description="form (answer with content) or url (visit, then accept).")
    message: str | None = Field(description="What the server asks, for the person.")
    requested_schema: dict[str, Any] | None = Field(
        description="JSON Schema the accepted content must match (form mode)."
    )
    url: str | None = Field(description="Where to go (url mode).")


class InputRequestOut(BaseModel):
    tool_call_id: int = Field(description="Answer with POST /v1/tool-calls/{id}/input.")
    loop_id: UUID
    name: str = Field(description="The tool the model called.")
    arguments: dict[str, Any] | None
    round: int = Field(description="1 for the server's first question, 2 for the next, ...")
    requests: list[InputRequestItem]
    asked_at: datetime

    @classmethod
    def of(cls, tc: ToolCall) -> InputRequestOut:
        from agentd.engine.inputs import describe

        return cls(
            tool_call_id=tc.id,
            loop_id=tc.loop_id,
            name=tc.name,
            arguments=tc.arguments if isinstance(tc.arguments, dict) else None,
            round=tc.input_rounds,
            requests=[InputRequestItem(**r) for r in describe(tc.input_request)],
            asked_at=tc.updated_at,
        )


class MessageOut(BaseModel):
    id: int
    role: str = Field(description="user, assistant, tool, or system (a compaction summary).")
    content: str | None
    reasoning: str | None
    tool_calls: list[ToolCallOut] = Field(description="Calls this assistant message made.")
    tool_call_id: int | None = Field(description="For a tool result: the call it answers.")
    status: MessageStatus
    hidden: bool = Field(description="A streaming partial or a failed shell (never history).")
    step: int | None
    finish_reason: str | None
    error_message: str | None
    tokens: Tokens | None = Field(
        description="The request that produced this message (assistant messages and "
        "summaries): usage, or an estimate flagged `estimated`."
    )
    cost: Money | None = Field(
        None,
        description="USD this message's model call cost (a decimal string); null when the "
        "model has no known price, and on messages no model call produced.",
    )
    model: str | None = Field(None, description="The model the call asked for.")
    ttft: float | None = Field(None, description="Seconds to the first token (streamed turns).")
    tps: float | None = Field(None, description="Output tokens per second of generation.")
    summary_through: int | None = Field(
        None,
        description="A compaction summary: the last message id it stands for in the prompt "
        "(those messages stay in this transcript).",
    )
    superseded: bool = Field(False, description="Left the prompt at a regenerate; kept on record.")
    forked_from_message_id: int | None = Field(
        None, description="On a fork: the source loop's message this one was copied from."
    )
    created_at: datetime

    @classmethod
    def of(cls, msg: Message, calls: list[ToolCall]) -> MessageOut:
        meta = msg.metadata if isinstance(msg.metadata, dict) else {}
        usage = meta.get("usage") if isinstance(meta.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        tokens = None
        if msg.tokens_prompt is not None or msg.tokens_completion is not None:
            tokens = Tokens(
                prompt=msg.tokens_prompt or 0,
                completion=msg.tokens_completion or 0,
                cached=msg.tokens_cached or 0,
                reasoning=int(usage.get("tokens_reasoning") or 0),
                estimated=msg.tokens_estimated,
            )
        return cls(
            id=msg.id,
            role=msg.role,
            content=msg.content,
            reasoning=msg.reasoning,
            tool_calls=[ToolCallOut.of(c) for c in calls],
            tool_call_id=msg.tool_call_id,
            status=MessageStatus(msg.status),
            hidden=msg.hidden,
            step=msg.step,
            finish_reason=msg.finish_reason,
            error_message=msg.error_message,
            tokens=tokens,
            cost=Decimal(usage["cost"]) if isinstance(usage.get("cost"), str) else None,
            model=usage.get("model") if isinstance(usage.get("model"), str) else None,
            ttft=msg.ttft,
            tps=usage.get("tps") if isinstance(usage.get("tps"), int | float) else None,
            summary_through=msg.summary_through,
            superseded=msg.superseded_at is not None,
            forked_from_message_id=msg.forked_from_message_id,
            created_at=msg.created_at,
        )


def render_messages(msgs: list[Message], calls: list[ToolCall]) -> list[MessageOut]:
    by_message: dict[int, list[ToolCall]] = {}
    for c in calls:
        by_message.setdefault(c.message_id, []).append(c)
    return [MessageOut.of(m, by_message.get(m.id, [])) for m in msgs]


class EventOut(BaseModel):
    id: int
    loop_id: UUID | None = Field(None, description="Null for fleet events (schedules, ...).")
    name: str
    reason: str | None
    message_id: int | None
    tool_call_id: int | None
    http_method: str | None
    url: str | None = Field(description="Wire log: the URL called (secrets redacted).")
    status: int | None
    request_data: JSONValue = Field(description="Wire log: request body (secrets redacted).")
    response_data: JSONValue = Field(description="Wire log: response body (secrets redacted).")
    duration: float | None
    log: str | None
    created_at: datetime

    @classmethod
    def of(cls, e: Event) -> EventOut:
        return cls(
            id=e.id,
            loop_id=e.loop_id,
            name=e.name,
            reason=e.reason,
            message_id=e.message_id,
            tool_call_id=e.tool_call_id,
            http_method=e.http_method,
            url=e.url,
            status=e.status,
            request_data=e.request_data,
            response_data=e.response_data,
            duration=e.duration,
            log=e.log,
            created_at=e.created_at,
        )


class AgentVersionOut(BaseModel):
    id: str
    created_at: datetime
    version_policy: str = Field(description="pin | latest")
    loops_active: int = Field(
        description="Queued, running and waiting loops on this version (or moving to it)."
    )
    workers: list[UUID] = Field(description="Live workers that can run this version.")
    current: bool = Field(description="The version this API process loaded.")


class AgentOut(BaseModel):
    name: str
    source: str | None = Field(
        description="Where this API process loaded it from; null: only workers have it."
    )
    dialect: str | None
    model: str | None
    streaming: bool | None
    sequential_tool_calls: bool | None
    version: str | None = Field(
        None, description="The version this API process loaded (new loops run it)."
    )
    versions: list[AgentVersionOut] = Field(
        default_factory=list, description="Every recorded version, newest first."
    )


class UpgradeLoop(_In):
    to_version: CleanStr | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Default: the agent's newest version.",
    )
    dry_run: Bool = Field(default=False, description="Only show what would change; write nothing.")


class UpgradeAgent(UpgradeLoop):
    from_version: CleanStr | None = Field(
        default=None, min_length=1, max_length=64, description="Only loops on this version."
    )


class LoopUpgradeOut(BaseModel):
    loop_id: UUID
    agent: str
    from_version: str | None
    to_version: str
    pending_upgrade: str | None = Field(
        description="The version the loop moves to at its next turn boundary (after a real "
        "upgrade: to_version)."
    )
    known_from: bool = Field(description="Whether from_version's definition is recorded.")
    dry_run: bool
    applies: str
    diff: dict[str, Any] = Field(
        description="changed keys, servers, prefixes, whitelists, tools renamed/removed/kept, "
        "approval_required added/removed, limits from/to."
    )
    orphaned_calls: list[str] = Field(
        description="Unresolved calls whose tool the target would not offer under that name "
        "(a real upgrade is refused while there are any)."
    )


class AgentUpgradeOut(BaseModel):
    agent: str
    to_version: str
    dry_run: bool
    loops: list[UUID] = Field(description="Loops upgraded (or, dry, that would be).")
    refused: list[dict[str, Any]] = Field(description="Loops refused: {loop_id, orphaned_calls}.")
    diffs: dict[str, Any] = Field(description="The diff from each version the loops were on.")
    remaining: bool = Field(description="More loops to upgrade: send the request again.")


class ProviderOut(BaseModel):
    id: str = Field(description="Hash of base_url, model and key_fingerprint.")
    base_url: str
    model: str
    key_fingerprint: str = Field(description="sha256 of the api token, first 12 hex digits.")
    blocked_until: datetime | None = Field(
        None, description="Back-off set by a 429/503 Retry-After; turns wait until then."
    )
    blocked_seconds: float
    last_status: int | None
    last_throttled_at: datetime | None
    max_concurrency: int | None
    rpm: int | None
    tpm: int | None
    in_flight: int
    window_requests: int = Field(description="Requests admitted in the current rate window.")
    window_tokens: int = Field(description="Tokens charged in the current rate window.")
    throttled: int = Field(description="429/503 answers with Retry-After seen.")
    admitted: int
    deferred: int


class ConcurrencyKeyOut(BaseModel):
    key: str
    running: int = Field(description="Loops holding a slot under the key.")
    updated_at: datetime


class ProvidersOut(BaseModel):
    providers: list[ProviderOut]
    concurrency_keys: list[ConcurrencyKeyOut] = Field(
        description="The busiest concurrency keys (at most 100)."
    )
    window_seconds: float


class ModelCostOut(BaseModel):
    model: str | None = Field(description="The model the calls asked for.")
    cost: Money | None = Field(description="USD (a decimal string); null: no known price.")
    turns: int = Field(description="Model calls (turns and compaction summaries).")
    unpriced_turns: int


class AgentCostOut(BaseModel):
    agent: str
    cost: Money | None = Field(
        description="USD over the window's loops (a decimal string); null when none of "
        "their turns had a price."
    )
    loops: int
    unpriced_turns: int = Field(description="Turns on models with no known price.")
    tokens: Tokens
    models: list[ModelCostOut]


class CostsOut(BaseModel):
    since: datetime
    until: datetime
    agents: list[AgentCostOut] = Field(description="Loops created in [since, until), by agent.")


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

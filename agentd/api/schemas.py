"""Request and response bodies of the REST API (pydantic, so /openapi.json is exact)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Generic, TypeVar
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from agentd.engine.states import LoopStatus
from agentd.store.models import Event, Loop, Message, ToolCall

T = TypeVar("T")


# --- input hygiene ---------------------------------------------------------------------
# PostgreSQL refuses NUL in text and jsonb, and UTF-8 refuses lone surrogates; both would
# surface as a database error (a 500). Reject them here so bad input is a 422 naming the
# field and nothing is written.


def _clean_text(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL (\\u0000) characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return value


def _clean_json(value: Any) -> Any:
    if isinstance(value, str):
        _clean_text(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _clean_text(k)
            _clean_json(v)
    elif isinstance(value, list):
        for v in value:
            _clean_json(v)
    return value


CleanStr = Annotated[str, AfterValidator(_clean_text)]
NonBlank = Annotated[
    str, Field(min_length=1, pattern=r"\S", max_length=1_000_000), AfterValidator(_clean_text)
]
JsonObject = Annotated[dict[str, Any], AfterValidator(_clean_json)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartLoop(_In):
    agent: CleanStr = Field(min_length=1, max_length=200, description="A registered agent name.")
    message: NonBlank = Field(description="The first user message.")
    subject: CleanStr | None = Field(
        None, max_length=1000, description="Who or what the loop is about (the MCP principal)."
    )
    state: JsonObject | None = Field(None, description="A JSON object the agent can read.")

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"agent": "support", "message": "Where is my order?", "state": {}}]
        },
    )


class AppendMessage(_In):
    content: NonBlank = Field(description="The user message to add before continuing.")


class Resume(_In):
    from_: list[LoopStatus] | None = Field(
        None,
        alias="from",
        description="Statuses the loop may be resumed from (default: init, paused, failed, "
        "stopped). Add `completed` to re-run a finished loop.",
    )

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Observe(_In):
    observed: bool = Field(True, description="Publish live deltas and messages for this loop.")


class Decision(_In):
    reason: CleanStr | None = Field(None, max_length=10_000, description="Why (recorded).")


# --- responses -------------------------------------------------------------------------


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(
        None, description="Pass back to get the next page; null on the last page."
    )


class Tokens(BaseModel):
    prompt: int
    completion: int
    cached: int


class LoopOut(BaseModel):
    id: UUID
    agent: str
    status: LoopStatus
    status_reason: str | None
    step_count: int
    error_message: str | None
    subject: str | None
    title: str | None
    state: dict[str, Any]
    frozen: bool
    observed: bool
    tokens: Tokens
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, loop: Loop) -> LoopOut:
        return cls(
            id=loop.id,
            agent=loop.agent,
            status=LoopStatus(loop.status),
            status_reason=loop.status_reason,
            step_count=loop.step_count,
            error_message=loop.error_message,
            subject=loop.subject,
            title=loop.title,
            state=loop.state if isinstance(loop.state, dict) else {},
            frozen=loop.frozen,
            observed=loop.observed,
            tokens=Tokens(
                prompt=loop.tokens_prompt,
                completion=loop.tokens_completion,
                cached=loop.tokens_cached,
            ),
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
    status: str
    result: str | None
    is_success: bool | None
    error_message: str | None
    approval_required: bool
    approval_status: str | None = Field(description="pending, approved, denied, expired or null.")
    approval_deadline: datetime | None
    decided_at: datetime | None
    decided_by: str | None
    decision_reason: str | None
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
            status=tc.status,
            result=tc.result,
            is_success=tc.is_success,
            error_message=tc.error_message,
            approval_required=tc.approval_required,
            approval_status=tc.approval_status,
            approval_deadline=tc.approval_deadline,
            decided_at=tc.decided_at,
            decided_by=tc.decided_by,
            decision_reason=tc.decision_reason,
            created_at=tc.created_at,
        )


class MessageOut(BaseModel):
    id: int
    role: str = Field(description="user, assistant or tool.")
    content: str | None
    reasoning: str | None
    tool_calls: list[ToolCallOut] = Field(description="Calls this assistant message made.")
    tool_call_id: int | None = Field(description="For a tool result: the call it answers.")
    status: str
    hidden: bool = Field(description="A streaming partial or a failed shell (never history).")
    step: int | None
    finish_reason: str | None
    error_message: str | None
    tokens: Tokens | None
    created_at: datetime

    @classmethod
    def of(cls, msg: Message, calls: list[ToolCall]) -> MessageOut:
        tokens = None
        if msg.tokens_prompt is not None or msg.tokens_completion is not None:
            tokens = Tokens(
                prompt=msg.tokens_prompt or 0,
                completion=msg.tokens_completion or 0,
                cached=msg.tokens_cached or 0,
            )
        return cls(
            id=msg.id,
            role=msg.role,
            content=msg.content,
            reasoning=msg.reasoning,
            tool_calls=[ToolCallOut.of(c) for c in calls],
            tool_call_id=msg.tool_call_id,
            status=msg.status,
            hidden=msg.hidden,
            step=msg.step,
            finish_reason=msg.finish_reason,
            error_message=msg.error_message,
            tokens=tokens,
            created_at=msg.created_at,
        )


def render_messages(msgs: list[Message], calls: list[ToolCall]) -> list[MessageOut]:
    by_message: dict[int, list[ToolCall]] = {}
    for c in calls:
        by_message.setdefault(c.message_id, []).append(c)
    return [MessageOut.of(m, by_message.get(m.id, [])) for m in msgs]


class EventOut(BaseModel):
    id: int
    name: str
    reason: str | None
    message_id: int | None
    tool_call_id: int | None
    http_method: str | None
    url: str | None = Field(description="Wire log: the URL called (secrets redacted).")
    status: int | None
    request_data: Any = Field(description="Wire log: request body (secrets redacted).")
    response_data: Any = Field(description="Wire log: response body (secrets redacted).")
    duration: float | None
    log: str | None
    created_at: datetime

    @classmethod
    def of(cls, e: Event) -> EventOut:
        return cls(
            id=e.id,
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


class AgentOut(BaseModel):
    name: str
    source: str
    dialect: str | None
    model: str | None
    streaming: bool | None
    sequential_tool_calls: bool | None

"""The transcript and the event log as the API shows them."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from uuid import UUID

from pydantic import BaseModel, Field

from agentd.api.schemas.base import Money, Tokens
from agentd.api.schemas.tool_calls import ToolCallOut
from agentd.json_types import JSONValue
from agentd.states import MessageStatus
from agentd.store.models import Event, Message, ToolCall


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

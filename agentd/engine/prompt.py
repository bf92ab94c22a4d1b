"""Turns stored messages and tool calls into the dialect-neutral prompt history."""

from __future__ import annotations

from agentd.llm.types import Message, ToolCallRequest
from agentd.store.models import Message as MessageRow
from agentd.store.models import ToolCall


def history(system_prompt: str, rows: list[MessageRow], calls: list[ToolCall]) -> list[Message]:
    by_message: dict[int, list[ToolCall]] = {}
    by_id: dict[int, ToolCall] = {}
    for c in calls:
        by_message.setdefault(c.message_id, []).append(c)
        by_id[c.id] = c
    out: list[Message] = []
    if system_prompt:
        out.append(Message(role="system", content=system_prompt))
    for row in rows:
        if row.hidden:
            continue
        if row.role == "assistant":
            tcs = [
                ToolCallRequest(
                    id=c.provider_call_id,
                    name=c.name,
                    arguments=c.arguments if c.arguments is not None else {},
                    raw_arguments=c.arguments_raw or "",
                    metadata=c.metadata,
                )
                for c in sorted(by_message.get(row.id, []), key=lambda c: c.position)
            ]
            out.append(
                Message(
                    role="assistant",
                    content=row.content,
                    reasoning=row.reasoning,
                    tool_calls=tcs,
                    metadata=row.metadata or {},
                )
            )
        elif row.role == "tool":
            call = by_id.get(row.tool_call_id or -1)
            out.append(
                Message(
                    role="tool",
                    content=row.content,
                    tool_call_id=call.provider_call_id if call else None,
                    name=call.name if call else None,
                    is_error=bool(call and call.is_success is False),
                )
            )
        elif row.role in ("user", "system"):
            out.append(Message(role=row.role, content=row.content))  # type: ignore[arg-type]
    return out

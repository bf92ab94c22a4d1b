"""The AG-UI event shapes agentd writes (camelCase, as the protocol specifies) and the
ids a client resumes from (`Last-Event-ID`, see the package docstring)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from agentd.api.problems import ApiProblem
from agentd.json_types import JSONValue
from agentd.store.models import Message, ToolCall

AGUI_VERSION = "1.0"
_EVENT_ID = re.compile(r"^(\d{1,18})\.(\d{1,18})\.(?:(end)|\d{1,18}(?:\.(\d{1,18})\.(\d{1,18}))?)$")


@dataclass(frozen=True)
class Resume:
    anchor: int
    high: int
    ended: bool
    open_id: int | None
    open_len: int


def parse_last_event_id(value: str | None) -> Resume | None:
    if value is None or not value.strip():
        return None
    m = _EVENT_ID.match(value.strip())
    if m is None:
        raise ApiProblem(
            400,
            "Last-Event-ID is not an id this AG-UI stream sent (<A>.<N>.<k>[.<M>.<L>] or "
            "<A>.<N>.end)",
            problem_type="invalid-last-event-id",
        )
    return Resume(
        anchor=int(m.group(1)),
        high=int(m.group(2)),
        ended=m.group(3) is not None,
        open_id=int(m.group(4)) if m.group(4) else None,
        open_len=int(m.group(5) or 0),
    )


def event(kind: str, **fields: JSONValue) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "timestamp": int(time.time() * 1000)}
    out.update({k: v for k, v in fields.items() if v is not None})
    return out


def arguments(tc: ToolCall) -> str:
    if tc.arguments is not None:
        return json.dumps(tc.arguments)
    return tc.arguments_raw or ""


def snapshot_messages(rows: list[Message], calls: list[ToolCall]) -> list[dict[str, Any]]:
    """The transcript as AG-UI messages (compaction summaries and superseded replies left
    out: they are not the conversation a person reads)."""
    by_message: dict[int, list[ToolCall]] = {}
    for c in calls:
        by_message.setdefault(c.message_id, []).append(c)
    out: list[dict[str, Any]] = []
    for m in rows:
        if m.superseded_at is not None or m.is_summary:
            continue
        if m.role == "user":
            out.append({"id": str(m.id), "role": "user", "content": m.content or ""})
        elif m.role == "assistant":
            msg: dict[str, Any] = {"id": str(m.id), "role": "assistant"}
            if m.content:
                msg["content"] = m.content
            own = by_message.get(m.id, [])
            if own:
                msg["toolCalls"] = [
                    {
                        "id": str(c.id),
                        "type": "function",
                        "function": {"name": c.name, "arguments": arguments(c)},
                    }
                    for c in own
                ]
            out.append(msg)
        elif m.role == "tool" and m.tool_call_id is not None:
            out.append(
                {
                    "id": str(m.id),
                    "role": "tool",
                    "content": m.content or "",
                    "toolCallId": str(m.tool_call_id),
                }
            )
    return out


def status_value(status: str, reason: object) -> dict[str, Any]:
    """`agentd.status`: `status_reason` is the loop resource's name; `reason` stays for
    clients written before it."""
    return {"status": status, "reason": reason, "status_reason": reason}

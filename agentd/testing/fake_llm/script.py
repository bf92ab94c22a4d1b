"""What FakeLLM answers: rules (a matcher on the request's last message, a reply, an
optional count) and the dialect-neutral view of that last message."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentd.json_types import JSONValue


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)  # a str is sent verbatim
    id: str | None = None


@dataclass
class Reply:
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None
    reasoning_field: str = "reasoning_content"  # open_ai: or "reasoning" (vLLM)
    signature: str | None = None  # anthropic/gemini; defaults to a fake one with reasoning
    usage: tuple[int, int] | None = None
    chunk_size: int = 8  # characters per streamed text / argument fragment
    chunk_delay: float = 0.0  # seconds between streamed events
    status: int | None = None  # an error status instead of an answer
    retry_after: float | str | None = None  # header value (seconds or HTTP-date)
    error_body: str | dict[str, Any] | None = None
    delay_before_first_byte: float = 0.0  # before the status line (the prefill window)
    stall_after_chunks: int | None = None  # go silent forever after N events
    drop_after_chunks: int | None = None  # abort the connection after N events
    truncate_after_chunks: int | None = None  # end the body cleanly after N events
    malformed: bool = False  # a broken JSON event (or body) after the first event
    error_after_chunks: int | None = None  # an in-stream error event (error_body) after N events
    # after N events, send the rest one byte at a time, `trickle_delay` apart: every read
    # brings something, so a per-read timeout never trips, yet events complete very slowly
    trickle_after_chunks: int | None = None
    trickle_delay: float = 0.2


@dataclass
class LastMessage:
    role: str  # 'user' | 'assistant' | 'tool'
    text: str
    tool_name: str | None = None


Matcher = None | str | Callable[[LastMessage], bool]


@dataclass
class Rule:
    match: Matcher = None
    reply: Reply | Callable[[LastMessage], Reply] = field(
        default_factory=Reply
    )  # or built per request
    times: int | None = None

    def matches(self, last: LastMessage) -> bool:
        if self.match is None:
            return True
        if isinstance(self.match, str):
            return self.match in last.text
        return bool(self.match(last))


@dataclass
class RecordedRequest:
    dialect: str
    path: str
    headers: dict[str, str]
    json: JSONValue
    stream: bool
    at: float = field(default_factory=time.monotonic)  # when it arrived (time.monotonic)
    done_at: float | None = None  # when its response ended (or the client left)


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for block in content:
            if isinstance(block, dict):
                value = block.get("text", block.get("content", ""))
                out.append(_text_of(value))
            else:
                out.append(str(block))
        return "".join(out)
    return "" if content is None else json.dumps(content)


def last_message(dialect: str, body: object) -> LastMessage:
    """The last message of a request body, in dialect-neutral terms."""
    if not isinstance(body, dict):
        return LastMessage("user", "")
    if dialect == "gemini":
        contents = body.get("contents") or [{}]
        last = contents[-1] if isinstance(contents[-1], dict) else {}
        parts = [p for p in last.get("parts") or [] if isinstance(p, dict)]
        for p in parts:
            if isinstance(p.get("functionResponse"), dict):
                fr = p["functionResponse"]
                return LastMessage("tool", json.dumps(fr.get("response")), fr.get("name"))
        role = "assistant" if last.get("role") == "model" else "user"
        return LastMessage(role, "".join(str(p.get("text", "")) for p in parts))
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)] or [{}]
    last = messages[-1]
    names: dict[str, str] = {}
    for m in messages:  # call id -> tool name, to name tool results
        for c in m.get("tool_calls") or []:
            if isinstance(c, dict):
                names[str(c.get("id"))] = str((c.get("function") or {}).get("name"))
        if isinstance(m.get("content"), list):
            for b in m["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_use":
                    names[str(b.get("id"))] = str(b.get("name"))
    if last.get("role") == "tool":
        return LastMessage(
            "tool", _text_of(last.get("content")), names.get(str(last.get("tool_call_id")))
        )
    if isinstance(last.get("content"), list):
        for b in last["content"]:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                return LastMessage(
                    "tool", _text_of(b.get("content")), names.get(str(b.get("tool_use_id")))
                )
    role = str(last.get("role") or "user")
    return LastMessage(
        role if role in ("user", "assistant") else "user", _text_of(last.get("content"))
    )

"""The anthropic dialect: Messages API, `POST origin + /v1/messages`, native event stream.

`max_tokens` is required by the API: 4096 when the request leaves it None.
`reasoning_effort` maps to extended thinking via `THINKING_BUDGETS`; the budget must stay
below `max_tokens`, so an unset `max_tokens` grows to `budget + 4096` and an explicit one
shrinks the budget (never below the API minimum of 1024).
"""

from __future__ import annotations

import json
from typing import Any

from agentd.errors import LLMProtocolError, LLMStatusError
from agentd.llm import body, reasoning, sse
from agentd.llm.dialects.base import (
    Rendered,
    close,
    expect,
    join_url,
    load_json,
    new_call_id,
    opt,
    parse_arguments,
    reopen,
)
from agentd.llm.types import (
    LLMRequest,
    LLMResponse,
    Message,
    Provider,
    StreamDelta,
    ToolCallRequest,
    Usage,
)

NAME = "anthropic"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
MIN_BUDGET = 1024
#: reasoning_effort -> thinking.budget_tokens (None: thinking off).
THINKING_BUDGETS: dict[str, int | None] = {
    "none": None,
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
}
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}
#: mid-stream `error` event types -> the HTTP status they stand for.
ERROR_STATUSES = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


def _thinking_blocks(message: Message) -> list[dict[str, Any]]:
    blocks = message.metadata.get("thinking_blocks")
    if isinstance(blocks, list) and blocks:
        return [dict(b) for b in blocks if isinstance(b, dict)]
    signature = message.metadata.get("thought_signature")
    if signature and message.reasoning:
        return [{"type": "thinking", "thinking": message.reasoning, "signature": signature}]
    return []


def _assistant_blocks(message: Message, carry: reasoning.Carry) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = _thinking_blocks(message) if carry.native else []
    text = reasoning.weld(message.content, carry)
    if text:
        blocks.append({"type": "text", "text": text})
    for call in message.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                # The API wants an object; unparseable arguments go back as their text.
                "input": call.arguments
                if call.arguments is not None
                else {"_raw_arguments": call.raw_arguments},
            }
        )
    return blocks


def _append(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    # Consecutive same-role turns merge: all tool results must sit in one user message.
    if out and out[-1]["role"] == role:
        out[-1]["content"].extend(blocks)
    else:
        out.append({"role": role, "content": blocks})


def parse_usage(raw: Any, into: Usage | None = None) -> Usage | None:
    if not isinstance(raw, dict):
        return into
    usage = into or Usage()
    try:
        if raw.get("input_tokens") is not None or raw.get("cache_read_input_tokens") is not None:
            cached = int(raw.get("cache_read_input_tokens") or 0)
            created = int(raw.get("cache_creation_input_tokens") or 0)
            usage.prompt_tokens = int(raw.get("input_tokens") or 0) + cached + created
            usage.cached_tokens = cached
        if raw.get("output_tokens") is not None:
            usage.completion_tokens = int(raw["output_tokens"])  # cumulative in message_delta
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: int(inf)
        raise LLMProtocolError("usage has non-numeric token counts") from exc
    return usage


def _finish(stop_reason: str | None) -> str | None:
    if stop_reason is None:
        return None
    return FINISH_REASONS.get(stop_reason, stop_reason)


class Anthropic:
    name = NAME

    def url(self, provider: Provider, *, stream: bool) -> str:
        return join_url(provider.base_url, "/v1/messages")

    def headers(self, provider: Provider) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if provider.api_token:
            headers["x-api-key"] = provider.api_token
        return headers

    def is_stream(self, request: LLMRequest, payload: dict[str, Any]) -> bool:
        return bool(payload.get("stream"))

    def render(self, request: LLMRequest) -> Rendered:
        strategies = reasoning.normalize(request.reasoning_strategies, NAME)
        tally = reasoning.Tally()
        system: list[str] = []
        # A request that extends an earlier one (the same shared messages first) folds
        # only its new messages into that one's elements (base.reopen/close).
        key = (NAME, tuple(strategies))
        found, messages = reopen(request.messages, key, "content")
        start = 0
        if found is not None:
            start = len(found.messages)
            (tally.messages, tally.chars, tally.inline_chars), done = found.state
            system.extend(done)
        for m in request.messages[start:]:
            if m.role == "system":
                system.append(m.content or "")
            elif m.role == "user":
                _append(messages, "user", [{"type": "text", "text": m.content or ""}])
            elif m.role == "tool":
                block: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id or "",
                    "content": m.content or "",
                }
                if m.is_error:
                    block["is_error"] = True
                _append(messages, "user", [block])
            else:
                carry = reasoning.plan(m, strategies, NAME)
                tally.add(carry)
                blocks = _assistant_blocks(m, carry)
                if blocks:
                    _append(messages, "assistant", blocks)
        elements = body.Elements()
        state = ((tally.messages, tally.chars, tally.inline_chars), tuple(system))
        close(request.messages, key, messages, found, state, elements)
        payload: dict[str, Any] = {
            "model": request.provider.model,
            "messages": messages,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
            "stream": request.stream,
        }
        if system:
            payload["system"] = "\n\n".join(system)
        if request.tools:
            payload["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ]
        effort = (request.reasoning_effort or "").lower()
        budget = THINKING_BUDGETS.get(effort, THINKING_BUDGETS["medium"]) if effort else None
        if budget is not None:
            if request.max_tokens is None:
                payload["max_tokens"] = budget + DEFAULT_MAX_TOKENS
            elif budget >= request.max_tokens:
                budget = max(MIN_BUDGET, request.max_tokens - 1)
            payload["thinking"] = {"type": "enabled", "budget_tokens": budget}
        return Rendered(payload=payload, reasoning_carried=tally.as_dict(), elements=elements)

    def parse(self, body: Any) -> LLMResponse:
        body = expect(body, dict, "response")
        if body.get("type") == "error":
            raise LLMProtocolError(f"error in response: {body.get('error')}")
        acc = StreamAccumulator()
        for i, block in enumerate(expect(body.get("content"), list, "content")):
            acc.start_block(i, expect(block, dict, f"content[{i}]"), whole=True)
            acc.stop_block(i)
        acc.usage = parse_usage(body.get("usage"))
        acc.stop_reason = opt(body.get("stop_reason"), str, "stop_reason")
        acc.model = opt(body.get("model"), str, "model")
        acc.done = True
        return acc.finish()

    def stream_parser(self) -> StreamAccumulator:
        return StreamAccumulator()


class StreamAccumulator:
    """Aggregates Messages events; blocks are keyed by `index` and may interleave."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.usage: Usage | None = None
        self.stop_reason: str | None = None
        self.model: str | None = None
        self.done = False

    def start_block(self, index: int, block: dict[str, Any], *, whole: bool = False) -> None:
        kind = expect(block.get("type"), str, "content_block.type")
        entry: dict[str, Any] = {"type": kind, "text": "", "json": "", "signature": ""}
        if kind == "text":
            entry["text"] = opt(block.get("text"), str, "text") or ""
        elif kind == "thinking":
            entry["text"] = opt(block.get("thinking"), str, "thinking") or ""
            entry["signature"] = opt(block.get("signature"), str, "signature") or ""
        elif kind == "redacted_thinking":
            entry["data"] = block.get("data")
        elif kind == "tool_use":
            entry["id"] = opt(block.get("id"), str, "tool_use.id") or new_call_id()
            entry["name"] = expect(block.get("name"), str, "tool_use.name")
            initial = block.get("input")
            # Streaming starts with `input: {}` and sends the real input as json deltas.
            if whole or (isinstance(initial, dict) and initial):
                entry["input"] = initial
        self.blocks[index] = entry

    def stop_block(self, index: int) -> None:
        if index in self.blocks:
            self.blocks[index]["stopped"] = True

    def feed(self, event: sse.Event) -> list[StreamDelta]:
        if not event.data.strip():
            return []
        data = load_json(event.data, "stream event")
        if not isinstance(data, dict):
            raise LLMProtocolError("stream event is not a JSON object")
        kind = data.get("type") or event.event
        if kind == "message_start":
            message = expect(data.get("message"), dict, "message_start.message")
            self.model = opt(message.get("model"), str, "model")
            self.usage = parse_usage(message.get("usage"), self.usage)
        elif kind == "content_block_start":
            index = expect(data.get("index"), int, "index")
            self.start_block(index, expect(data.get("content_block"), dict, "content_block"))
            entry = self.blocks[index]
            if entry["type"] in ("text", "thinking") and entry["text"]:
                thinking = entry["type"] == "thinking"
                return [
                    StreamDelta(
                        content="" if thinking else entry["text"],
                        reasoning=entry["text"] if thinking else "",
                    )
                ]
        elif kind == "content_block_delta":
            return self._delta(data)
        elif kind == "content_block_stop":
            self.stop_block(expect(data.get("index"), int, "index"))
        elif kind == "message_delta":
            delta = opt(data.get("delta"), dict, "message_delta.delta") or {}
            reason = opt(delta.get("stop_reason"), str, "stop_reason")
            if reason:
                self.stop_reason = reason
            self.usage = parse_usage(data.get("usage"), self.usage)
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raw_err = data.get("error")
            err: dict[str, Any] = raw_err if isinstance(raw_err, dict) else {}
            err_type = str(err.get("type", "api_error"))
            raise LLMStatusError(
                f"error event in stream: {err_type}: {err.get('message', '')}",
                status_code=ERROR_STATUSES.get(err_type, 500),
                body=event.data,
            )
        # ping and unknown events are ignored
        return []

    def _delta(self, data: dict[str, Any]) -> list[StreamDelta]:
        index = expect(data.get("index"), int, "index")
        entry = self.blocks.get(index)
        if entry is None:
            raise LLMProtocolError(f"content_block_delta for unknown block {index}")
        delta = expect(data.get("delta"), dict, "content_block_delta.delta")
        kind = delta.get("type")
        if kind == "text_delta":
            text = expect(delta.get("text"), str, "text_delta.text")
            entry["text"] += text
            return [StreamDelta(content=text)] if text else []
        if kind == "thinking_delta":
            text = expect(delta.get("thinking"), str, "thinking_delta.thinking")
            entry["text"] += text
            return [StreamDelta(reasoning=text)] if text else []
        if kind == "signature_delta":
            entry["signature"] += expect(delta.get("signature"), str, "signature_delta")
        elif kind == "input_json_delta":
            entry["json"] += expect(delta.get("partial_json"), str, "partial_json")
        return []

    def finish(self) -> LLMResponse:
        if not self.done:
            raise LLMProtocolError("stream ended before message_stop (truncated)")
        content: list[str] = []
        thoughts: list[str] = []
        thinking_blocks: list[dict[str, Any]] = []
        calls: list[ToolCallRequest] = []
        for index in sorted(self.blocks):
            entry = self.blocks[index]
            kind = entry["type"]
            if kind == "text":
                content.append(entry["text"])
            elif kind == "thinking":
                thoughts.append(entry["text"])
                thinking_blocks.append(
                    {"type": "thinking", "thinking": entry["text"], "signature": entry["signature"]}
                )
            elif kind == "redacted_thinking":
                thinking_blocks.append({"type": "redacted_thinking", "data": entry.get("data")})
            elif kind == "tool_use":
                if "input" in entry and not entry["json"]:
                    value = entry["input"]
                    raw = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                    arguments = value if isinstance(value, dict) else None
                else:
                    raw = entry["json"]
                    arguments = parse_arguments(raw)
                calls.append(
                    ToolCallRequest(
                        id=entry["id"], name=entry["name"], arguments=arguments, raw_arguments=raw
                    )
                )
        metadata: dict[str, Any] = {}
        signatures = [b["signature"] for b in thinking_blocks if b.get("signature")]
        if signatures:
            metadata["thought_signature"] = signatures[0]
        if len(thinking_blocks) > 1 or any(b["type"] != "thinking" for b in thinking_blocks):
            metadata["thinking_blocks"] = thinking_blocks
        if self.stop_reason:
            metadata["finish_reason_raw"] = self.stop_reason
        return LLMResponse(
            content="".join(content),
            reasoning="".join(thoughts) or None,
            tool_calls=calls,
            finish_reason=_finish(self.stop_reason),
            usage=self.usage,
            model=self.model,
            metadata=metadata,
        )

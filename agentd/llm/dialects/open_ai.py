"""The open_ai dialect: Chat Completions, `POST origin + /v1/chat/completions`, native SSE."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from agentd.errors import LLMProtocolError
from agentd.llm import body, reasoning, sse
from agentd.llm.dialects.base import (
    Prefix,
    Rendered,
    dump_arguments,
    expect,
    join,
    join_url,
    keep,
    load_json,
    new_call_id,
    opt,
    parse_arguments,
    render_memo,
    resume,
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

NAME = "open_ai"


def _messages(
    messages: list[Message], strategies: list[str], elements: body.Elements
) -> tuple[list[dict[str, Any]], reasoning.Tally]:
    """The `messages` list and its reasoning tally. A request that extends an earlier one
    (the same shared messages first: base.resume) renders only its new messages."""
    key = (NAME, tuple(strategies))
    found = resume(messages, key)
    tally = reasoning.Tally()
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    joined: str | None = ""
    start = 0
    if found is not None:  # one element per message
        start = len(found.messages)
        out.extend(found.elements)
        tally.messages, tally.chars, tally.inline_chars = found.state
        joined = found.joined
    for m in messages[start:]:
        element, carry, text = render_memo(
            m, key, functools.partial(_render_one, m, strategies), elements
        )
        if carry is not None:
            tally.add(carry)
        out.append(element)
        if text is None:
            joined = None
        else:
            texts.append(text)
    if joined is not None:
        joined = join(joined, texts)
        elements.joined = (out, list(out), joined)
    state = (tally.messages, tally.chars, tally.inline_chars)
    keep(messages, key, Prefix(list(messages), list(out), len(out), joined, state), found)
    return out, tally


def _render_one(
    message: Message, strategies: list[str]
) -> tuple[dict[str, Any], reasoning.Carry | None]:
    """The message's element of `messages`, and its reasoning carry (assistants only)."""
    if message.role == "tool":
        tool = {
            "role": "tool",
            "tool_call_id": message.tool_call_id or "",
            "content": message.content or "",
        }
        return tool, None
    if message.role != "assistant":
        return {"role": message.role, "content": message.content or ""}, None
    carry = reasoning.plan(message, strategies, NAME)
    out: dict[str, Any] = {"role": "assistant", "content": reasoning.weld(message.content, carry)}
    if carry.native:
        out["reasoning_content"] = message.reasoning
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": dump_arguments(call.arguments, call.raw_arguments),
                },
            }
            for call in message.tool_calls
        ]
    elif out["content"] is None:
        out["content"] = ""
    return out, carry


def parse_usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    prompt_details = raw.get("prompt_tokens_details") or {}
    completion_details = raw.get("completion_tokens_details") or {}
    try:
        return Usage(
            prompt_tokens=int(raw.get("prompt_tokens") or 0),
            completion_tokens=int(raw.get("completion_tokens") or 0),
            cached_tokens=int(prompt_details.get("cached_tokens") or 0)
            if isinstance(prompt_details, dict)
            else 0,
            reasoning_tokens=int(completion_details.get("reasoning_tokens") or 0)
            if isinstance(completion_details, dict)
            else 0,
        )
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: int(inf)
        raise LLMProtocolError("usage has non-numeric token counts") from exc


def _reasoning_of(obj: dict[str, Any], what: str) -> str | None:
    # DeepSeek/llama.cpp say reasoning_content, vLLM says reasoning: accept both, prefer the former.
    value = obj.get("reasoning_content")
    if value is None:
        value = obj.get("reasoning")
    return opt(value, str, f"{what}.reasoning_content")


def _error_message(body: dict[str, Any]) -> str:
    err = body.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)


class OpenAI:
    name = NAME

    def url(self, provider: Provider, *, stream: bool) -> str:
        return join_url(provider.base_url, "/v1/chat/completions")

    def headers(self, provider: Provider) -> dict[str, str]:
        if provider.api_token:
            return {"Authorization": f"Bearer {provider.api_token}"}
        return {}

    def is_stream(self, request: LLMRequest, payload: dict[str, Any]) -> bool:
        return bool(payload.get("stream"))

    def render(self, request: LLMRequest) -> Rendered:
        strategies = reasoning.normalize(request.reasoning_strategies, NAME)
        elements = body.Elements()
        messages, tally = _messages(request.messages, strategies, elements)
        payload: dict[str, Any] = {
            "model": request.provider.model,
            "messages": messages,
            "stream": request.stream,
        }
        if request.stream:
            payload["stream_options"] = {"include_usage": True}
        if request.tools:
            payload["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                }
                for t in request.tools
            ]
        if request.max_tokens is not None:
            payload["max_tokens"] = request.max_tokens
        if request.reasoning_effort:
            payload["reasoning_effort"] = request.reasoning_effort
        return Rendered(payload=payload, reasoning_carried=tally.as_dict(), elements=elements)

    def parse(self, body: Any) -> LLMResponse:
        body = expect(body, dict, "response")
        if "error" in body and not body.get("choices"):
            raise LLMProtocolError(f"error in response: {_error_message(body)}")
        choices = expect(body.get("choices"), list, "choices")
        if not choices:
            raise LLMProtocolError("response has no choices")
        choice = expect(choices[0], dict, "choices[0]")
        message = expect(choice.get("message"), dict, "choices[0].message")
        calls = []
        for i, raw in enumerate(opt(message.get("tool_calls"), list, "tool_calls") or []):
            raw = expect(raw, dict, f"tool_calls[{i}]")
            fn = expect(raw.get("function"), dict, f"tool_calls[{i}].function")
            args = fn.get("arguments")
            raw_args = args if isinstance(args, str) else ("" if args is None else _dumps(args))
            calls.append(
                ToolCallRequest(
                    id=opt(raw.get("id"), str, "tool_call.id") or new_call_id(),
                    name=expect(fn.get("name"), str, "tool_call.function.name"),
                    arguments=parse_arguments(raw_args),
                    raw_arguments=raw_args,
                )
            )
        return LLMResponse(
            content=opt(message.get("content"), str, "message.content") or "",
            reasoning=_reasoning_of(message, "message") or None,
            tool_calls=calls,
            finish_reason=opt(choice.get("finish_reason"), str, "finish_reason"),
            usage=parse_usage(body.get("usage")),
            model=opt(body.get("model"), str, "model"),
        )

    def stream_parser(self) -> StreamAccumulator:
        return StreamAccumulator()


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@dataclass
class _PendingCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


class StreamAccumulator:
    """Aggregates Chat Completions chunks; tool calls are keyed by `index`, never by order."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, _PendingCall] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.model: str | None = None
        self.done = False

    def feed(self, event: sse.Event) -> list[StreamDelta]:
        data = event.data.strip()
        if not data:
            return []
        if data == "[DONE]":
            self.done = True
            return []
        chunk = load_json(data, "stream chunk")
        if not isinstance(chunk, dict):
            raise LLMProtocolError("stream chunk is not a JSON object")
        if chunk.get("error") is not None:
            raise LLMProtocolError(f"error in stream: {_error_message(chunk)}")
        self.model = opt(chunk.get("model"), str, "model") or self.model
        usage = parse_usage(chunk.get("usage"))
        if usage is not None:
            self.usage = usage
        deltas: list[StreamDelta] = []
        # vLLM may send `choices: null` or omit it on the usage chunk.
        for choice in opt(chunk.get("choices"), list, "choices") or []:
            choice = expect(choice, dict, "choice")
            if choice.get("index", 0) != 0:
                continue
            delta = opt(choice.get("delta"), dict, "delta") or {}
            text = opt(delta.get("content"), str, "delta.content")
            thought = _reasoning_of(delta, "delta")
            if thought:
                self.reasoning.append(thought)
            if text:
                self.content.append(text)
            if thought or text:
                deltas.append(StreamDelta(content=text or "", reasoning=thought or ""))
            for frag in opt(delta.get("tool_calls"), list, "delta.tool_calls") or []:
                self._tool_fragment(expect(frag, dict, "delta.tool_calls[]"))
            reason = opt(choice.get("finish_reason"), str, "finish_reason")
            if reason:
                self.finish_reason = reason
        return deltas

    def _tool_fragment(self, frag: dict[str, Any]) -> None:
        index = frag.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            # Some servers omit index on single calls; a new id means a new call.
            if frag.get("id") or not self.calls:
                index = max(self.calls, default=-1) + 1
            else:
                index = max(self.calls)
        call = self.calls.setdefault(index, _PendingCall())
        call_id = opt(frag.get("id"), str, "tool_call.id")
        if call_id:
            call.id = call_id
        fn = opt(frag.get("function"), dict, "tool_call.function") or {}
        name = opt(fn.get("name"), str, "tool_call.function.name")
        if name:
            call.name = name  # only on the first fragment of an index
        args = opt(fn.get("arguments"), str, "tool_call.function.arguments")
        if args:
            call.arguments += args

    def finish(self) -> LLMResponse:
        if not self.done and self.finish_reason is None:
            raise LLMProtocolError("stream ended before [DONE] or a finish_reason (truncated)")
        calls = []
        for index in sorted(self.calls):
            pending = self.calls[index]
            if not pending.name:
                raise LLMProtocolError(f"streamed tool call {index} has no name")
            calls.append(
                ToolCallRequest(
                    id=pending.id or new_call_id(),
                    name=pending.name,
                    arguments=parse_arguments(pending.arguments),
                    raw_arguments=pending.arguments,
                )
            )
        return LLMResponse(
            content="".join(self.content),
            reasoning="".join(self.reasoning) or None,
            tool_calls=calls,
            finish_reason=self.finish_reason,
            usage=self.usage,
            model=self.model,
        )

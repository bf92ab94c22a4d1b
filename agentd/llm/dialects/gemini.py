"""The gemini dialect: `POST origin + /v1beta/models/{model}:generateContent`, SSE streaming.

The key goes in `x-goog-api-key`. `thoughtSignature` is a Part-level sibling of
`functionCall`; with parallel calls only the first carries it. Signatures are captured per
tool call (`ToolCallRequest.metadata["thought_signature"]`) and always echoed back on their
functionCall part, whatever the reasoning strategy, because Gemini 3 rejects a model turn
that lost them. `reasoning_effort` maps to `thinkingConfig.thinkingBudget` via
`THINKING_BUDGETS`.
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

NAME = "gemini"
#: reasoning_effort -> thinkingConfig.thinkingBudget (0 turns thinking off).
THINKING_BUDGETS: dict[str, int] = {
    "none": 0,
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 24576,
}
FINISH_REASONS = {"STOP": "stop", "MAX_TOKENS": "length"}


def _model_parts(message: Message, carry: reasoning.Carry) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    signature = message.metadata.get("thought_signature")
    call_signed = any(c.metadata.get("thought_signature") for c in message.tool_calls)
    if carry.native and message.reasoning:
        thought: dict[str, Any] = {"text": message.reasoning, "thought": True}
        if signature and not call_signed:
            thought["thoughtSignature"] = signature
        parts.append(thought)
    text = reasoning.weld(message.content, carry)
    if text:
        parts.append({"text": text})
    for call in message.tool_calls:
        fc: dict[str, Any] = {"name": call.name, "args": call.arguments or {}}
        if not call.metadata.get("synthetic_id"):
            fc["id"] = call.id
        part: dict[str, Any] = {"functionCall": fc}
        if call.metadata.get("thought_signature"):
            part["thoughtSignature"] = call.metadata["thought_signature"]
        parts.append(part)
    return parts


def _append(out: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    if out and out[-1]["role"] == role:
        out[-1]["parts"].extend(parts)
    else:
        out.append({"role": role, "parts": parts})


def parse_usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    try:
        thoughts = int(raw.get("thoughtsTokenCount") or 0)
        return Usage(
            prompt_tokens=int(raw.get("promptTokenCount") or 0),
            completion_tokens=int(raw.get("candidatesTokenCount") or 0) + thoughts,
            cached_tokens=int(raw.get("cachedContentTokenCount") or 0),
            reasoning_tokens=thoughts,
        )
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: int(inf)
        raise LLMProtocolError("usageMetadata has non-numeric token counts") from exc


class Gemini:
    name = NAME

    def url(self, provider: Provider, *, stream: bool) -> str:
        model = (provider.model_name or provider.model).removeprefix("models/")
        if stream:
            return join_url(
                provider.base_url,
                f"/v1beta/models/{model}:streamGenerateContent",
                {"alt": "sse"},
            )
        return join_url(provider.base_url, f"/v1beta/models/{model}:generateContent")

    def headers(self, provider: Provider) -> dict[str, str]:
        return {"x-goog-api-key": provider.api_token} if provider.api_token else {}

    def is_stream(self, request: LLMRequest, payload: dict[str, Any]) -> bool:
        return request.stream  # the path, not the payload, says so

    def render(self, request: LLMRequest) -> Rendered:
        strategies = reasoning.normalize(request.reasoning_strategies, NAME)
        tally = reasoning.Tally()
        system: list[str] = []
        calls: dict[str, ToolCallRequest] = {}
        # A request that extends an earlier one (the same shared messages first) folds
        # only its new messages into that one's elements (base.reopen/close).
        key = (NAME, tuple(strategies))
        found, contents = reopen(request.messages, key, "parts")
        start = 0
        if found is not None:
            start = len(found.messages)
            (tally.messages, tally.chars, tally.inline_chars), done, seen = found.state
            system.extend(done)
            calls.update(seen)
        for m in request.messages[start:]:
            if m.role == "system":
                system.append(m.content or "")
            elif m.role == "user":
                _append(contents, "user", [{"text": m.content or ""}])
            elif m.role == "tool":
                call = calls.get(m.tool_call_id or "")
                response = {"error" if m.is_error else "result": m.content or ""}
                fr: dict[str, Any] = {
                    "name": m.name or (call.name if call else ""),
                    "response": response,
                }
                if m.tool_call_id and not (call and call.metadata.get("synthetic_id")):
                    fr["id"] = m.tool_call_id
                _append(contents, "user", [{"functionResponse": fr}])
            else:
                calls.update({c.id: c for c in m.tool_calls})
                carry = reasoning.plan(m, strategies, NAME)
                tally.add(carry)
                parts = _model_parts(m, carry)
                if parts:
                    _append(contents, "model", parts)
        elements = body.Elements()
        state = ((tally.messages, tally.chars, tally.inline_chars), tuple(system), calls)
        close(request.messages, key, contents, found, state, elements)
        payload: dict[str, Any] = {"contents": contents}
        if system:
            payload["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
        if request.tools:
            payload["tools"] = [
                {
                    "functionDeclarations": [
                        {"name": t.name, "description": t.description, "parameters": t.input_schema}
                        for t in request.tools
                    ]
                }
            ]
        config: dict[str, Any] = {}
        if request.max_tokens is not None:
            config["maxOutputTokens"] = request.max_tokens
        effort = (request.reasoning_effort or "").lower()
        if effort:
            budget = THINKING_BUDGETS.get(effort, THINKING_BUDGETS["medium"])
            config["thinkingConfig"] = {"thinkingBudget": budget, "includeThoughts": budget > 0}
        if config:
            payload["generationConfig"] = config
        return Rendered(payload=payload, reasoning_carried=tally.as_dict(), elements=elements)

    def parse(self, body: Any) -> LLMResponse:
        acc = StreamAccumulator()
        acc.feed_object(body)
        return acc.finish()

    def stream_parser(self) -> StreamAccumulator:
        return StreamAccumulator()


class StreamAccumulator:
    """Aggregates GenerateContentResponse chunks (each SSE `data:` is a whole response)."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[ToolCallRequest] = []
        self.signature: str | None = None
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.model: str | None = None

    def feed(self, event: sse.Event) -> list[StreamDelta]:
        if not event.data.strip():
            return []
        return self.feed_object(load_json(event.data, "stream chunk"))

    def feed_object(self, chunk: Any) -> list[StreamDelta]:
        if not isinstance(chunk, dict):
            raise LLMProtocolError("gemini chunk is not a JSON object")
        if isinstance(chunk.get("error"), dict):
            err = chunk["error"]
            code = err.get("code")
            raise LLMStatusError(
                f"error in stream: {err.get('status', '')}: {err.get('message', '')}",
                status_code=code if isinstance(code, int) and 400 <= code < 600 else 500,
                body=json.dumps(chunk)[:65536],
            )
        self.model = opt(chunk.get("modelVersion"), str, "modelVersion") or self.model
        usage = parse_usage(chunk.get("usageMetadata"))
        if usage is not None:
            self.usage = usage
        deltas: list[StreamDelta] = []
        candidates = opt(chunk.get("candidates"), list, "candidates") or []
        if not candidates:
            return deltas
        candidate = expect(candidates[0], dict, "candidates[0]")
        content = opt(candidate.get("content"), dict, "candidate.content") or {}
        for part in opt(content.get("parts"), list, "content.parts") or []:
            part = expect(part, dict, "part")
            signature = opt(part.get("thoughtSignature"), str, "thoughtSignature")
            if signature and self.signature is None:
                self.signature = signature
            call = opt(part.get("functionCall"), dict, "functionCall")
            text = opt(part.get("text"), str, "part.text")
            if call is not None:
                self._call(call, signature)
            elif text:
                if part.get("thought") is True:
                    self.reasoning.append(text)
                    deltas.append(StreamDelta(reasoning=text))
                else:
                    self.content.append(text)
                    deltas.append(StreamDelta(content=text))
        reason = opt(candidate.get("finishReason"), str, "finishReason")
        if reason:
            self.finish_reason = reason
        return deltas

    def _call(self, call: dict[str, Any], signature: str | None) -> None:
        name = expect(call.get("name"), str, "functionCall.name")
        args = call.get("args")
        if args is None:
            args = {}
        metadata: dict[str, Any] = {}
        call_id = opt(call.get("id"), str, "functionCall.id")
        if not call_id:
            call_id = new_call_id()
            metadata["synthetic_id"] = True
        if signature:
            metadata["thought_signature"] = signature
        self.calls.append(
            ToolCallRequest(
                id=call_id,
                name=name,
                arguments=args if isinstance(args, dict) else None,
                raw_arguments=args
                if isinstance(args, str)
                else json.dumps(args, ensure_ascii=False),
                metadata=metadata,
            )
        )

    def finish(self) -> LLMResponse:
        if self.finish_reason is None:
            raise LLMProtocolError("stream ended before a finishReason (truncated)")
        finish = FINISH_REASONS.get(self.finish_reason, self.finish_reason.lower())
        if finish == "stop" and self.calls:
            finish = "tool_calls"  # gemini has no tool-call finish reason
        metadata: dict[str, Any] = {"finish_reason_raw": self.finish_reason}
        if self.signature:
            metadata["thought_signature"] = self.signature
        return LLMResponse(
            content="".join(self.content),
            reasoning="".join(self.reasoning) or None,
            tool_calls=self.calls,
            finish_reason=finish,
            usage=self.usage,
            model=self.model,
            metadata=metadata,
        )

"""A FakeLLM reply on the wire of each dialect: the non-stream JSON body and the SSE
events of the streamed answer, plus the error bodies each provider sends."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from agentd.testing.fake_llm.script import Reply, ToolCall


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _args_text(call: ToolCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


def _call_id(call: ToolCall, i: int) -> str:
    return call.id or f"call_fake_{i}_{uuid.uuid4().hex[:8]}"


def _usage(reply: Reply) -> tuple[int, int]:
    if reply.usage is not None:
        return reply.usage
    return 10, max(1, len(reply.content) // 4 + len(reply.tool_calls))


def _signature(reply: Reply) -> str | None:
    if reply.signature is not None:
        return reply.signature
    return "fake-signature-1" if reply.reasoning else None


# --- wire rendering: each returns (non-stream JSON body, list of SSE events) ----------------


def _sse(data: object, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def _open_ai(reply: Reply, model: str) -> tuple[dict[str, Any], list[bytes]]:
    ids = [_call_id(c, i) for i, c in enumerate(reply.tool_calls)]
    prompt, completion = _usage(reply)
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    finish = "tool_calls" if reply.tool_calls else "stop"
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.reasoning:
        message[reply.reasoning_field] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": ids[i],
                "type": "function",
                "function": {"name": c.name, "arguments": _args_text(c)},
            }
            for i, c in enumerate(reply.tool_calls)
        ]
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        return _sse(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
        )

    events = [chunk({"role": "assistant", "content": ""})]
    for piece in _pieces(reply.reasoning or "", reply.chunk_size):
        events.append(chunk({reply.reasoning_field: piece}))
    for piece in _pieces(reply.content, reply.chunk_size):
        events.append(chunk({"content": piece}))
    for i, c in enumerate(reply.tool_calls):
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": ids[i],
                            "type": "function",
                            "function": {"name": c.name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        for piece in _pieces(_args_text(c), reply.chunk_size):
            events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    events.append(chunk({}, finish))
    events.append(
        _sse(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [],
                "usage": usage,
            }
        )
    )
    events.append(_sse("[DONE]"))
    return body, events


def _anthropic(reply: Reply, model: str) -> tuple[dict[str, Any], list[bytes]]:
    ids = [_call_id(c, i) for i, c in enumerate(reply.tool_calls)]
    prompt, completion = _usage(reply)
    stop = "tool_use" if reply.tool_calls else "end_turn"
    signature = _signature(reply)
    content: list[dict[str, Any]] = []
    if reply.reasoning:
        content.append({"type": "thinking", "thinking": reply.reasoning, "signature": signature})
    if reply.content:
        content.append({"type": "text", "text": reply.content})
    for i, c in enumerate(reply.tool_calls):
        content.append({"type": "tool_use", "id": ids[i], "name": c.name, "input": c.arguments})
    body = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }
    events = [
        _sse(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": prompt, "output_tokens": 1},
                },
            },
            "message_start",
        )
    ]

    def block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        events.append(
            _sse(
                {"type": "content_block_start", "index": index, "content_block": start},
                "content_block_start",
            )
        )
        for d in deltas:
            events.append(
                _sse(
                    {"type": "content_block_delta", "index": index, "delta": d},
                    "content_block_delta",
                )
            )
        events.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))

    index = 0
    if reply.reasoning:
        deltas = [
            {"type": "thinking_delta", "thinking": p}
            for p in _pieces(reply.reasoning, reply.chunk_size)
        ]
        deltas.append({"type": "signature_delta", "signature": signature or ""})
        block(index, {"type": "thinking", "thinking": "", "signature": ""}, deltas)
        index += 1
    if reply.content:
        block(
            index,
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": p} for p in _pieces(reply.content, reply.chunk_size)],
        )
        index += 1
    for i, c in enumerate(reply.tool_calls):
        block(
            index,
            {"type": "tool_use", "id": ids[i], "name": c.name, "input": {}},
            [
                {"type": "input_json_delta", "partial_json": p}
                for p in _pieces(_args_text(c), reply.chunk_size)
            ],
        )
        index += 1
    events.append(
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": completion},
            },
            "message_delta",
        )
    )
    events.append(_sse({"type": "message_stop"}, "message_stop"))
    return body, events


def _gemini(reply: Reply, model: str) -> tuple[dict[str, Any], list[bytes]]:
    prompt, completion = _usage(reply)
    usage = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion,
        "totalTokenCount": prompt + completion,
    }
    signature = _signature(reply)
    thought_parts = [
        {"text": p, "thought": True} for p in _pieces(reply.reasoning or "", reply.chunk_size)
    ]
    text_parts: list[dict[str, Any]] = [
        {"text": p} for p in _pieces(reply.content, reply.chunk_size)
    ]
    call_parts: list[dict[str, Any]] = []
    for c in reply.tool_calls:
        fc: dict[str, Any] = {"name": c.name, "args": c.arguments}
        if c.id:
            fc["id"] = c.id
        call_parts.append({"functionCall": fc})
    if signature:  # only the first functionCall of parallel calls carries it
        target = call_parts or text_parts or thought_parts
        if target:
            target[0]["thoughtSignature"] = signature
    whole_text = "".join(p["text"] for p in text_parts)
    parts: list[dict[str, Any]] = []
    if reply.reasoning:
        parts.append({"text": reply.reasoning, "thought": True})
    if whole_text:
        parts.append(
            {
                "text": whole_text,
                **({"thoughtSignature": signature} if signature and not call_parts else {}),
            }
        )
    parts.extend(call_parts)

    def chunk(p: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
        cand: dict[str, Any] = {"content": {"role": "model", "parts": p}, "index": 0}
        if finish:
            cand["finishReason"] = finish
        out: dict[str, Any] = {"candidates": [cand], "modelVersion": model}
        if finish:
            out["usageMetadata"] = usage
        return out

    body = chunk(parts, "STOP")
    events = [_sse(chunk([p])) for p in thought_parts + text_parts + call_parts]
    events.append(_sse(chunk([], "STOP")))
    return body, events


RENDER = {"open_ai": _open_ai, "anthropic": _anthropic, "gemini": _gemini}


def error_body(dialect: str, reply: Reply) -> bytes:
    if isinstance(reply.error_body, str):
        return reply.error_body.encode()
    if isinstance(reply.error_body, dict):
        return json.dumps(reply.error_body).encode()
    status = reply.status or 500
    if dialect == "anthropic":
        return json.dumps(
            {"type": "error", "error": {"type": "api_error", "message": f"fake {status}"}}
        ).encode()
    if dialect == "gemini":
        return json.dumps(
            {"error": {"code": status, "message": f"fake {status}", "status": "UNAVAILABLE"}}
        ).encode()
    return json.dumps({"error": {"message": f"fake {status}", "type": "fake_error"}}).encode()


def stream_error(reply: Reply) -> bytes:
    if isinstance(reply.error_body, dict):
        body = reply.error_body
    else:
        body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    return _sse(body, str(body.get("type") or "error"))

"""FakeLLM: a scripted local LLM server speaking open_ai, anthropic and gemini on their real paths.

A plain asyncio + h11 server (not uvicorn) so a test controls the socket itself: it can
stall forever, drop the connection mid-body, and count clients that hung up mid-response.
Rules are tried in order against the LAST message of the request; `times=N` expires one.

    fake = FakeLLM()
    async with fake:
        fake.add(Rule(match="weather", reply=Reply(tool_calls=[ToolCall("get_weather", {})])))
        ...  # point a Provider at fake.base_url

Also a process: `agentd fake-llm --port 0 [--rules rules.json]` (or `python -m
agentd.testing.fake_llm`) prints `LISTENING <port>`. Without --rules it runs
`default_rules()`: echo a user message, or call the tool a `/call NAME {json}` message
names, then report the tool's result. Rules are a JSON list of `{"match": null | {"contains": ...} |
{"role": ...} | {"tool_name": ...}, "reply": {...Reply fields}, "times": N}`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h11

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


class _ClientGone(Exception):
    pass


_GEMINI_PATH = re.compile(r"/v1beta/models/([^/:]+):(generateContent|streamGenerateContent)$")


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


_RENDER = {"open_ai": _open_ai, "anthropic": _anthropic, "gemini": _gemini}


def _error_body(dialect: str, reply: Reply) -> bytes:
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


def _stream_error(reply: Reply) -> bytes:
    if isinstance(reply.error_body, dict):
        body = reply.error_body
    else:
        body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    return _sse(body, str(body.get("type") or "error"))


class _Conn:
    """One accepted connection's I/O, with a watcher that notices the client hanging up."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.SERVER)
        self.eof: asyncio.Future[bytes] | None = None
        self.pending = b""

    async def send(self, event: h11.Event) -> None:
        data = self.h11.send(event)
        if data:
            if self.writer.is_closing():
                raise _ClientGone
            self.writer.write(data)
            try:
                await self.writer.drain()
            except (ConnectionError, OSError) as exc:
                raise _ClientGone from exc

    async def wait(self, seconds: float | None) -> None:
        """Sleep `seconds` (None: forever), raising _ClientGone if the client hangs up."""
        if seconds is not None and seconds <= 0 and (self.eof is None or not self.eof.done()):
            return
        if self.eof is None:
            self.eof = asyncio.ensure_future(self.reader.read(65536))
        done, _ = await asyncio.wait({self.eof}, timeout=seconds)
        if done:
            data = b""
            with contextlib.suppress(Exception):
                data = self.eof.result()
            self.eof = None
            if not data:
                raise _ClientGone
            self.pending += data  # the client sent more (never happens with httpx)

    async def release_watcher(self) -> None:
        if self.eof is None:
            return
        if self.eof.done():
            data = b""
            with contextlib.suppress(Exception):
                data = self.eof.result()
            self.pending += data
            if not data:
                self.pending = b""
                self.eof = None
                raise _ClientGone
        else:
            self.eof.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.eof
        self.eof = None


class FakeLLM:
    def __init__(
        self,
        rules: list[Rule] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = "fake-model",
    ) -> None:
        self.rules: list[Rule] = list(rules or [])
        self.requests: list[RecordedRequest] = []
        self.disconnects = 0  # clients that hung up mid-response
        self.default_reply = Reply(content="ok")
        self.host = host
        self.port = port
        self.model = model
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def add(self, rule: Rule) -> Rule:
        self.rules.append(rule)
        return rule

    def reply(self, **kwargs: Any) -> Rule:
        """Shortcut: `fake.reply(content="hi", times=1)` adds an always-matching rule."""
        times = kwargs.pop("times", None)
        return self.add(Rule(match=None, reply=Reply(**kwargs), times=times))

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, backlog=1024, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FakeLLM:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def wait_for_requests(
        self,
        n: int,
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> list[RecordedRequest]:
        deadline = time.monotonic() + timeout
        while len(self.requests) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"FakeLLM saw {len(self.requests)} requests, wanted {n}")
            await asyncio.sleep(0.01)
        return self.requests

    async def wait_for_disconnects(
        self,
        n: int,
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> None:
        deadline = time.monotonic() + timeout
        while self.disconnects < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"FakeLLM saw {self.disconnects} disconnects, wanted {n}")
            await asyncio.sleep(0.01)

    def _pick(self, last: LastMessage) -> Reply:
        for rule in self.rules:
            if rule.matches(last):
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times <= 0:
                        self.rules.remove(rule)
                return rule.reply(last) if callable(rule.reply) else rule.reply
        return self.default_reply

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(reader, writer)
        try:
            await self._serve(conn)
        except (_ClientGone, ConnectionError, h11.ProtocolError, asyncio.CancelledError):
            pass  # cancelled only by stop(): end quietly
        finally:
            self._tasks.discard(task)
            if conn.eof is not None:
                conn.eof.cancel()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, conn: _Conn) -> None:
        while True:
            request: h11.Request | None = None
            body = bytearray()
            while True:
                event = conn.h11.next_event()
                if event is h11.NEED_DATA:
                    if conn.pending:
                        data, conn.pending = conn.pending, b""
                    else:
                        data = await conn.reader.read(65536)
                    conn.h11.receive_data(data)
                elif isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    return
            assert request is not None
            try:
                await self._respond(conn, request, bytes(body))
            except _ClientGone:
                self.disconnects += 1
                return
            await conn.release_watcher()
            if conn.h11.our_state is h11.MUST_CLOSE or conn.h11.their_state is h11.MUST_CLOSE:
                return
            conn.h11.start_next_cycle()

    async def _respond(self, conn: _Conn, request: h11.Request, body: bytes) -> None:
        path = request.target.decode("latin-1")
        route = path.split("?", 1)[0]
        if request.method == b"GET" and route in ("/health", "/"):
            await self._send_whole(conn, 200, b'{"ok": true}')
            return
        gemini = _GEMINI_PATH.search(route)
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None
        if route.endswith("/v1/chat/completions"):
            dialect = "open_ai"
            stream = bool(isinstance(payload, dict) and payload.get("stream"))
        elif route.endswith("/v1/messages"):
            dialect = "anthropic"
            stream = bool(isinstance(payload, dict) and payload.get("stream"))
        elif gemini:
            dialect = "gemini"
            stream = gemini.group(2) == "streamGenerateContent"
        else:
            await self._send_whole(conn, 404, b'{"error": "no such route"}')
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
        recorded = RecordedRequest(dialect, path, headers, payload, stream)
        self.requests.append(recorded)
        try:
            await self._answer(conn, recorded, gemini)
        finally:
            recorded.done_at = time.monotonic()

    async def _answer(
        self, conn: _Conn, recorded: RecordedRequest, gemini: re.Match[str] | None
    ) -> None:
        dialect, payload, stream = recorded.dialect, recorded.json, recorded.stream
        reply = self._pick(last_message(dialect, payload))
        await conn.wait(reply.delay_before_first_byte)
        if reply.status is not None and reply.status >= 400:
            extra = []
            if reply.retry_after is not None:
                extra.append((b"retry-after", str(reply.retry_after).encode()))
            await self._send_whole(conn, reply.status, _error_body(dialect, reply), extra)
            return
        model = payload.get("model") if isinstance(payload, dict) else None
        whole, events = _RENDER[dialect](
            reply, str(model or (gemini and gemini.group(1)) or self.model)
        )
        if not stream:
            data = b'{"choices": [' if reply.malformed else json.dumps(whole).encode()
            await self._send_whole(conn, reply.status or 200, data)
            return
        await self._stream(conn, reply, events)

    async def _send_whole(
        self, conn: _Conn, status: int, data: bytes, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
            *(extra or []),
        ]
        await conn.send(h11.Response(status_code=status, headers=headers))
        await conn.send(h11.Data(data=data))
        await conn.send(h11.EndOfMessage())

    async def _stream(self, conn: _Conn, reply: Reply, events: list[bytes]) -> None:
        await conn.send(
            h11.Response(
                status_code=200,
                headers=[(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
            )
        )
        if reply.malformed:
            events = [*events[:1], b'data: {"choices": [{"delta": \n\n', *events[1:]]
        if reply.error_after_chunks is not None:
            cut = reply.error_after_chunks
            events = [*events[:cut], _stream_error(reply)]
        for n, event in enumerate(events):
            if reply.stall_after_chunks is not None and n >= reply.stall_after_chunks:
                await conn.wait(None)  # silent until the client gives up
            if reply.drop_after_chunks is not None and n >= reply.drop_after_chunks:
                conn.writer.transport.abort()
                raise _ClientGone
            if reply.truncate_after_chunks is not None and n >= reply.truncate_after_chunks:
                break
            if n and reply.chunk_delay:
                await conn.wait(reply.chunk_delay)
            if reply.trickle_after_chunks is not None and n >= reply.trickle_after_chunks:
                for i in range(len(event)):
                    await conn.send(h11.Data(data=event[i : i + 1]))
                    await conn.wait(reply.trickle_delay)
                continue
            await conn.send(h11.Data(data=event))
            if conn.eof is not None and conn.eof.done():
                await conn.wait(0)
        await conn.send(h11.EndOfMessage())


# --- process entry point --------------------------------------------------------------------


def rule_from_json(raw: dict[str, Any]) -> Rule:
    match = raw.get("match")
    matcher: Matcher
    if match is None:
        matcher = None
    elif isinstance(match, str):
        matcher = match
    elif "contains" in match:
        matcher = str(match["contains"])
    elif "role" in match:
        role = match["role"]
        matcher = lambda last: last.role == role  # noqa: E731
    elif "tool_name" in match:
        tool = match["tool_name"]
        matcher = lambda last: last.tool_name == tool  # noqa: E731
    else:
        raise ValueError(f"unknown match {match!r}")
    fields = dict(raw.get("reply") or {})
    fields["tool_calls"] = [ToolCall(**c) for c in fields.get("tool_calls") or []]
    if fields.get("usage") is not None:
        fields["usage"] = tuple(fields["usage"])
    return Rule(match=matcher, reply=Reply(**fields), times=raw.get("times"))


_CALL = re.compile(r"^\s*/call\s+(\S+)\s*(.*)$", re.S)


def _default_reply(last: LastMessage) -> Reply:
    """Echo, or the scripted tool call a `/call NAME {json}` message asks for."""
    streamed: dict[str, Any] = {"chunk_size": 3, "chunk_delay": 0.05}  # token by token
    if last.role == "tool":
        return Reply(content=f"The tool {last.tool_name or ''} answered: {last.text}", **streamed)
    m = _CALL.match(last.text)
    if m:
        raw = m.group(2).strip() or "{}"
        try:
            args = json.loads(raw)
        except json.JSONDecodeError:
            return Reply(content=f"/call needs JSON arguments, got {raw!r}", **streamed)
        return Reply(content=f"Calling {m.group(1)}.", tool_calls=[ToolCall(m.group(1), args)])
    return Reply(content=f"echo: {last.text}", **streamed)


def default_rules() -> list[Rule]:
    """The offline model's script when no rules are given (`agentd fake-llm`)."""
    return [Rule(match=None, reply=_default_reply)]


async def _serve_forever(fake: FakeLLM) -> None:
    await fake.start()
    print(f"LISTENING {fake.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await fake.stop()


def serve_command(args: argparse.Namespace) -> int:
    """`agentd fake-llm`: args carry host, port and rules (a JSON file, or None)."""
    rules = default_rules()
    if args.rules:
        try:
            with open(args.rules, encoding="utf-8") as f:
                rules = [rule_from_json(r) for r in json.load(f)]
        except (OSError, ValueError, TypeError) as exc:
            print(f"agentd fake-llm: cannot read rules from {args.rules}: {exc}", file=sys.stderr)
            return 2
    try:
        asyncio.run(_serve_forever(FakeLLM(rules, host=args.host, port=args.port)))
    except OSError as exc:
        print(
            f"agentd fake-llm: cannot listen on {args.host}:{args.port}: {exc.strerror}",
            file=sys.stderr,
        )
        return 5
    return 0


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentd.testing.fake_llm")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rules", help="JSON file: a list of rules (default: echo / /call)")
    sys.exit(serve_command(parser.parse_args(argv)))


if __name__ == "__main__":
    main(sys.argv[1:])

"""The FakeLLM server: a plain asyncio + h11 server (not uvicorn), so a test controls the
socket itself: it can stall forever, drop the connection mid-body, and count clients that
hung up mid-response."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import time
from typing import Any

import h11

from agentd.testing.fake_llm import dialects
from agentd.testing.fake_llm.script import LastMessage, RecordedRequest, Reply, Rule, last_message


class _ClientGone(Exception):
    pass


_GEMINI_PATH = re.compile(r"/v1beta/models/([^/:]+):(generateContent|streamGenerateContent)$")


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
            await self._send_whole(conn, reply.status, dialects.error_body(dialect, reply), extra)
            return
        model = payload.get("model") if isinstance(payload, dict) else None
        whole, events = dialects.RENDER[dialect](
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
            events = [*events[:cut], dialects.stream_error(reply)]
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

"""A small, real Streamable-HTTP MCP server (handshake era) with scripted failures, for tests.

```python
async with FakeMcpServer() as server:        # server.url -> http://127.0.0.1:<port>/mcp
    server.fail_next(2)                        # next two POSTs answer 500 text/plain
    ...
    assert server.requests[-1].idempotency_key == "agentd:tool_call:7"
```

Also `python -m agentd.testing.fake_mcp --port 0` (prints `LISTENING <port>`), and
`--stdio` to serve the same tools over stdin/stdout (`--hang-on` / `--exit-on` a method).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Literal

from agentd.json_types import JSONValue
from agentd.mcp import eras, jsonrpc
from agentd.mcp.port import IDEMPOTENCY_META_KEY, CallContext
from agentd.mcp.toolset import Toolset


def default_toolset() -> Toolset:
    tools = Toolset("fake-mcp", version="1.0.0")

    @tools.tool(description="Echo the text back")
    def echo(text: str) -> str:
        return text

    @tools.tool(description="Add two integers")
    async def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    @tools.tool(description="Fail with the given message (an isError result)")
    async def fail(message: str = "boom") -> str:
        raise RuntimeError(message)

    @tools.tool(description="Report the idempotency key the call carried")
    async def whoami(ctx: CallContext) -> dict[str, Any]:
        return {"idempotency_key": ctx.idempotency_key, "session_id": ctx.meta.get("session_id")}

    @tools.tool(description="Delete a record (irreversible)", requires_approval=True)
    async def delete_record(record_id: str) -> str:
        return f"deleted {record_id}"

    @tools.prompt(description="Greet someone", arguments=[{"name": "who", "required": True}])
    def greet(args: dict[str, str]) -> str:
        return f"Say hello to {args['who']}"

    return tools


@dataclass
class RecordedRequest:
    http_method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: JSONValue  # the parsed JSON, or the raw text when it was not JSON
    session_id: str | None

    @property
    def method(self) -> str | None:
        return self.body.get("method") if isinstance(self.body, dict) else None

    @property
    def idempotency_key(self) -> str | None:
        params = self.body.get("params") if isinstance(self.body, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        return meta.get(IDEMPOTENCY_META_KEY) if isinstance(meta, dict) else None


class FakeMcpServer:
    def __init__(
        self,
        toolset: Toolset | None = None,
        *,
        mode: Literal["json", "sse"] = "json",
        token: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = 0,
        stateless: bool = False,
    ) -> None:
        self.toolset = toolset or default_toolset()
        # Like an SDK server with stateless_http: no Mcp-Session-Id is issued or required.
        self.stateless = stateless
        self.mode = mode
        self.token = token
        self.host = host
        self.port = port
        self.requests: list[RecordedRequest] = []
        self.sessions: set[str] = set()
        self.fail_rate = 0.0  # fraction of POSTs answered 500, drawn from a seeded RNG
        self.delay = 0.0  # seconds before answering each POST
        self._random = random.Random(seed)
        self._faults: list[str] = []  # queued one-shot faults: "fail", "drop", "garbage"
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- scripting ---------------------------------------------------------------------

    def fail_next(self, n: int = 1) -> None:
        """The next `n` POSTs answer HTTP 500 with a plain-text body."""
        self._faults.extend(["fail"] * n)

    def drop_next(self, n: int = 1) -> None:
        """The next `n` POSTs get their connection closed without an answer."""
        self._faults.extend(["drop"] * n)

    def garbage_next(self, n: int = 1) -> None:
        """The next `n` POSTs answer 200 with a body that is not JSON."""
        self._faults.extend(["garbage"] * n)

    def expire_sessions(self) -> None:
        """Forget every session: later requests carrying one get 404."""
        self.sessions.clear()

    def calls(self, method: str = "tools/call") -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == method]

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/mcp"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FakeMcpServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- HTTP --------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        line = await reader.readline()
        if not line.strip():
            return False
        http_method, path, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (raw := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = raw.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        data = await reader.readexactly(int(headers.get("content-length", "0") or 0))
        try:
            body: JSONValue = json.loads(data) if data else None
        except ValueError:
            body = data.decode("utf-8", errors="replace")
        session_id = headers.get("mcp-session-id")
        self.requests.append(RecordedRequest(http_method, path, headers, body, session_id))
        if http_method == "DELETE":
            self.sessions.discard(session_id or "")
            return await _write(writer, 200)
        if http_method != "POST":
            return await _write(writer, 405, headers={"Allow": "POST, DELETE"})
        if self.delay:
            await asyncio.sleep(self.delay)
        fault = self._faults.pop(0) if self._faults else None
        if fault is None and self.fail_rate and self._random.random() < self.fail_rate:
            fault = "fail"
        if fault == "drop":
            return False
        if fault == "fail":
            return await _write(writer, 500, b"Internal Server Error", ctype="text/plain")
        if fault == "garbage":
            return await _write(writer, 200, b"<html>surprise</html>", ctype="text/html")
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            return await _write(writer, 401)
        # The era as agentd's own endpoint tells it: by the request's protocol version header.
        modern = headers.get("mcp-protocol-version") == eras.MODERN_VERSION
        return await self._post(writer, body, session_id, modern=modern)

    async def _post(
        self,
        writer: asyncio.StreamWriter,
        body: object,
        session_id: str | None,
        *,
        modern: bool = False,
    ) -> bool:
        if not isinstance(body, dict):
            code = jsonrpc.PARSE_ERROR if isinstance(body, str) else jsonrpc.INVALID_REQUEST
            return await _write_json(
                writer, 400, jsonrpc.error(None, code, "Invalid JSON-RPC body")
            )
        extra: dict[str, str] = {}
        if body.get("method") == "initialize":
            answer, minted = await self.toolset.handle(body)
            if not self.stateless:
                session_id = minted or uuid.uuid4().hex
                self.sessions.add(session_id)
                extra["Mcp-Session-Id"] = session_id
        else:
            if not self.stateless and not session_id:
                error = jsonrpc.error(
                    body.get("id"), jsonrpc.INVALID_REQUEST, "Bad Request: Missing session ID"
                )
                return await _write_json(writer, 400, error)
            if not self.stateless and session_id not in self.sessions:
                error = jsonrpc.error(body.get("id"), -32001, "Session not found")
                return await _write_json(writer, 404, error)
            if jsonrpc.is_notification(body):
                return await _write(writer, 202)
            answer, _ = await self.toolset.handle(
                body, session_id=session_id, context=CallContext()
            )
        result = answer.get("result") if answer is not None else None
        if isinstance(result, dict) and modern:
            # A 2026-07-28 client validates these (the SDK 2.x refuses a result without them).
            eras.stamp_result(str(body.get("method")), result, self.toolset.server_info())
        if self.mode == "json" or answer is None:
            return await _write_json(writer, 200, answer, extra)
        return await self._stream(writer, body, answer, extra)

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        request: dict[str, Any],
        answer: dict[str, Any],
        extra: dict[str, str],
    ) -> bool:
        """SSE answer: progress (if asked) and a log message, then the response; then close."""
        head = {
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "Connection": "close",
            **extra,
        }
        writer.write(_head(200, head))
        token = ((request.get("params") or {}).get("_meta") or {}).get("progressToken")
        messages: list[dict[str, Any]] = []
        if token is not None:
            messages += [
                jsonrpc.notification(
                    "notifications/progress", {"progressToken": token, "progress": i, "total": 2}
                )
                for i in (1, 2)
            ]
        messages.append(
            jsonrpc.notification("notifications/message", {"level": "info", "data": "working"})
        )
        messages.append(answer)
        for i, message in enumerate(messages):
            writer.write(f"id: {i}\nevent: message\ndata: {jsonrpc.dumps(message)}\n\n".encode())
            await writer.drain()
        return False


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _write(
    writer: asyncio.StreamWriter,
    status: int,
    content: bytes = b"",
    *,
    ctype: str | None = None,
    headers: dict[str, str] | None = None,
) -> bool:
    head = {"Content-Length": str(len(content)), **(headers or {})}
    if ctype:
        head["Content-Type"] = ctype
    writer.write(_head(status, head) + content)
    await writer.drain()
    return True


async def _write_json(
    writer: asyncio.StreamWriter,
    status: int,
    body: JSONValue,
    headers: dict[str, str] | None = None,
) -> bool:
    content = jsonrpc.dumps(body).encode() if body is not None else b""
    code = 202 if body is None else status
    return await _write(
        writer, code, content, ctype="application/json" if content else None, headers=headers
    )


# -- command line ----------------------------------------------------------------------


async def _serve_stdio(hang_on: str | None, exit_on: str | None) -> None:
    tools = default_toolset()
    while line := await asyncio.to_thread(sys.stdin.readline):
        try:
            envelope = json.loads(line)
        except ValueError:
            continue
        method = envelope.get("method") if isinstance(envelope, dict) else None
        if method == exit_on:
            print(f"fatal: exiting on {method} as scripted", file=sys.stderr, flush=True)
            os._exit(3)
        if method == hang_on:
            print(f"hanging on {method} as scripted", file=sys.stderr, flush=True)
            await asyncio.Event().wait()
        answer, _ = await tools.handle(envelope)
        if answer is not None:
            sys.stdout.write(jsonrpc.dumps(answer) + "\n")
            sys.stdout.flush()


async def _serve_http(args: argparse.Namespace) -> None:
    async with FakeMcpServer(
        mode=args.mode,
        token=args.token,
        host=args.host,
        port=args.port,
        stateless=args.stateless,
    ) as server:
        print(f"LISTENING {server.port}", flush=True)
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentd.testing.fake_mcp", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", choices=["json", "sse"], default="json")
    parser.add_argument("--token")
    parser.add_argument(
        "--stateless", action="store_true", help="issue and require no Mcp-Session-Id"
    )
    parser.add_argument("--stdio", action="store_true", help="serve over stdin/stdout instead")
    parser.add_argument("--hang-on", help="(stdio) never answer this method")
    parser.add_argument("--exit-on", help="(stdio) exit with code 3 on this method")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        if args.stdio:
            asyncio.run(_serve_stdio(args.hang_on, args.exit_on))
        else:
            asyncio.run(_serve_http(args))


if __name__ == "__main__":
    main()

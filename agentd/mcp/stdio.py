"""`StdioTransport`: spawn the server per call, handshake, ask one thing, shut it down.

Stateless only: no process outlives a `deliver`, so no server-side state survives between
calls (the session id the client keeps is synthetic).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

from agentd.errors import McpError, ToolTimeout
from agentd.mcp import eras, jsonrpc, schemas
from agentd.mcp.port import CallContext, DeliveryResult
from agentd.mcp.transport_errors import map_transport_errors

_SAFE_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ")
_LINE_LIMIT = 16 * 1024 * 1024
_STDERR_CAP = 64 * 1024
_TAIL = 2000


class StdioTransport:
    kind = "stdio"

    def __init__(
        self,
        command: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60.0,
        grace: float = 1.0,
    ) -> None:
        if isinstance(command, str) or not command:
            raise ValueError("command must be a non-empty argv list, never a shell string")
        self.command = list(command)
        self.env = dict(env or {})
        self.cwd = cwd
        self.timeout = timeout
        self.grace = grace

    async def deliver(
        self,
        payload: dict[str, Any],
        *,
        session_id: str | None = None,
        context: CallContext | None = None,
    ) -> DeliveryResult:
        raw_request = jsonrpc.dumps(payload)
        if jsonrpc.is_notification(payload):
            # Each call performs its own handshake; there is no process to notify.
            return DeliveryResult(
                body=None, session_id=session_id, raw_request=raw_request, raw_response=""
            )
        started = time.monotonic()
        target = " ".join(self.command)
        with map_transport_errors(target, timeout=self.timeout, timeout_error=ToolTimeout):
            proc = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**{k: os.environ[k] for k in _SAFE_ENV if k in os.environ}, **self.env},
                cwd=self.cwd,
                limit=_LINE_LIMIT,
                start_new_session=True,  # so shutdown reaches grandchildren (npx, shells)
            )
        stderr = bytearray()
        stderr_task = asyncio.create_task(_drain(proc.stderr, stderr))
        session = _Session(proc, target)
        try:
            async with asyncio.timeout(self.timeout):
                if payload.get("method") != "initialize":
                    await session.ask(_initialize_request())
                    await session.send(jsonrpc.notification("notifications/initialized"))
                    body, raw_response = await session.ask(payload)
                else:
                    body, raw_response = await session.ask(payload)
                    await session.send(jsonrpc.notification("notifications/initialized"))
        except TimeoutError as exc:
            await _shutdown(proc, grace=0)
            await _finish(stderr_task)
            raise ToolTimeout(
                f"MCP server {target} did not answer within {self.timeout:g}s"
                + _tail(stderr, session.stray)
            ) from exc
        except _ServerGone as exc:
            await _shutdown(proc, grace=self.grace)
            await _finish(stderr_task)
            raise McpError(f"MCP server {target} {exc}" + _tail(stderr, session.stray)) from None
        except BaseException:
            await _shutdown(proc, grace=0)
            raise
        finally:
            if proc.returncode is None:
                await _shutdown(proc, grace=self.grace)
            await _finish(stderr_task)
        return DeliveryResult(
            body=body,
            session_id=None if payload.get("method") == "initialize" else session_id,
            raw_request=raw_request,
            raw_response=raw_response,
            status=200,
            stderr=(bytes(stderr).decode("utf-8", errors="replace") + session.stray) or None,
            duration=time.monotonic() - started,
            refused=session.refused,
        )


class _ServerGone(Exception):
    pass


class _Session:
    """Line-delimited JSON-RPC over one child's stdin/stdout."""

    def __init__(self, proc: asyncio.subprocess.Process, target: str) -> None:
        self.proc = proc
        self.target = target
        self.stray = ""  # non-JSON stdout lines, shown with stderr
        self.refused: list[str] = []  # server→client requests refused mid-call

    async def send(self, envelope: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(jsonrpc.dumps(envelope).encode() + b"\n")
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise _ServerGone(f"closed its stdin (exit code {self.proc.returncode})") from exc

    async def ask(self, envelope: dict[str, Any]) -> tuple[dict[str, Any], str]:
        await self.send(envelope)
        assert self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                code = await _returncode(self.proc)
                raise _ServerGone(f"exited (code {code}) before answering {envelope.get('method')}")
            text = line.decode("utf-8", errors="replace").strip()
            try:
                message = schemas.parse(text)  # deep nesting: no RecursionError
            except ValueError:
                self.stray += text + "\n"
                continue
            if jsonrpc.is_response(message) and message.get("id") == envelope.get("id"):
                return message, text
            if isinstance(message, dict) and "method" in message and "id" in message:
                # A server→client request (roots, sampling, elicitation): agentd cannot
                # hold this process open for a person, so it refuses (ping is answered).
                await self.send(jsonrpc.refusal(message))
                if message.get("method") != "ping":
                    self.refused.append(str(message.get("method")))


def _initialize_request() -> dict[str, Any]:
    return jsonrpc.request(
        "initialize",
        {
            "protocolVersion": eras.LATEST_HANDSHAKE_VERSION,
            "capabilities": {},
            "clientInfo": eras.CLIENT_INFO,
        },
    )


async def _drain(stream: asyncio.StreamReader | None, sink: bytearray) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        if len(sink) < _STDERR_CAP:
            sink.extend(chunk[: _STDERR_CAP - len(sink)])


async def _finish(task: asyncio.Task[None]) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(task, timeout=1.0)


async def _returncode(proc: asyncio.subprocess.Process) -> int | None:
    with contextlib.suppress(TimeoutError):
        return await asyncio.wait_for(proc.wait(), timeout=1.0)
    return proc.returncode


async def _shutdown(proc: asyncio.subprocess.Process, *, grace: float) -> None:
    """Close stdin, wait briefly, terminate the process group, then kill it."""
    if proc.stdin is not None and not proc.stdin.is_closing():
        proc.stdin.close()
    for sig, wait in ((None, grace), (signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        if proc.returncode is not None:
            break
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), timeout=wait)
    if proc.stdin is not None:
        with contextlib.suppress(Exception):
            await proc.stdin.wait_closed()


def _tail(stderr: bytearray, stray: str) -> str:
    text = (bytes(stderr).decode("utf-8", errors="replace") + stray).strip()
    return f"; stderr: {text[-_TAIL:]}" if text else ""

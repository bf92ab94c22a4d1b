"""Reading a Streamable HTTP answer: a JSON body, or an SSE stream up to the answer,
resumed with `GET` + `Last-Event-ID` when the server closes it early."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from agentd.errors import McpError
from agentd.mcp import jsonrpc, schemas, sse

SNIPPET = 200
#: Headers a follow-up request (a refusal, a resume) does not repeat.
ROUTING = {"mcp-method", "mcp-name", "content-length"}
_MAX_RESUMES = 3
_DEFAULT_RETRY_MS = 1000
_MAX_RETRY_MS = 10_000  # a server's `retry` is honoured, within reason

GARBAGE: object = object()


def parse_json(text: str) -> Any:
    if not text.strip():
        return None
    try:
        return schemas.parse(text)  # nested too deep for json: read bounded, not raised
    except ValueError:
        return GARBAGE


async def read_sse(
    response: httpx.Response,
    request_id: Any,
    answer: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> tuple[str, Any, list[dict[str, Any]], tuple[str, float] | None]:
    """Read events until the response whose id matches `request_id`; earlier messages are
    notes, and server→client requests among them are answered through `answer`.

    A stream that ends first but named an event id is resumable: the last item is then
    `(last_event_id, retry_seconds)` and the body None."""
    lines: list[str] = []
    parser = sse.EventParser()
    notes: list[dict[str, Any]] = []
    asks: list[dict[str, Any]] = []

    def take(event: sse.Event | None) -> Any:
        if event is None or not event.data.strip():
            return None
        try:
            message = schemas.parse(event.data)
        except ValueError as exc:
            raise McpError(
                f"MCP server sent a non-JSON SSE event: {event.data[:SNIPPET]!r}"
            ) from exc
        if jsonrpc.is_response(message) and message.get("id") == request_id:
            return message
        notes.append(message)
        if jsonrpc.is_server_request(message):
            asks.append(message)
        return None

    async for line in _lines(response):
        lines.append(line)
        if (found := take(parser.feed_line(line))) is not None:
            return "\n".join(lines) + "\n", found, notes, None
        while asks and answer is not None:
            await answer(asks.pop(0))
    if (found := take(parser.flush())) is not None:
        return "\n".join(lines), found, notes, None
    if request_id is None:
        return "\n".join(lines), None, notes, None
    if parser.last_event_id is not None:
        retry = parser.retry if parser.retry is not None else _DEFAULT_RETRY_MS
        delay = min(retry, _MAX_RETRY_MS) / 1000
        return "\n".join(lines) + "\n", None, notes, (parser.last_event_id, delay)
    raise McpError(f"MCP SSE stream ended without a response to request {request_id!r}")


async def _lines(response: httpx.Response) -> AsyncIterator[str]:
    async for line in response.aiter_lines():
        yield line


async def resume(
    url: str,
    client: httpx.AsyncClient,
    headers: dict[str, str],
    response: httpx.Response,
    request_id: Any,
    answer: Callable[[dict[str, Any]], Awaitable[None]],
    resume_at: tuple[str, float],
    raw_response: str,
    notes: list[dict[str, Any]],
) -> tuple[str, Any]:
    """The answer's stream closed before the answer: reconnect with `GET` and
    `Last-Event-ID` after the server's `retry` delay (SEP-1699), a few times at most."""
    back = {k: v for k, v in headers.items() if k.lower() not in ROUTING | {"content-type"}}
    back["Accept"] = "text/event-stream"
    if sid := response.headers.get("mcp-session-id"):
        back["Mcp-Session-Id"] = sid
    raw = [raw_response]
    for _ in range(_MAX_RESUMES):
        last_id, delay = resume_at
        await asyncio.sleep(delay)
        back["Last-Event-ID"] = last_id
        async with client.stream("GET", url, headers=back) as again:
            ctype = again.headers.get("content-type", "")
            if again.status_code >= 400 or "text/event-stream" not in ctype:
                raise McpError(
                    f"MCP server {url} closed the stream before answering request "
                    f"{request_id!r} and refused to resume it (HTTP {again.status_code})"
                )
            more, body, more_notes, next_resume = await read_sse(again, request_id, answer)
        raw.append(more)
        notes.extend(more_notes)
        if body is not None or next_resume is None:
            return "".join(raw), body
        resume_at = next_resume
    raise McpError(f"MCP SSE stream ended without a response to request {request_id!r}")

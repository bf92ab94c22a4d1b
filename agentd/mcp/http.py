"""`HttpTransport`: MCP over Streamable HTTP, JSON or SSE answers, both protocol eras."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from agentd import redact
from agentd.errors import McpError, McpSessionInvalid
from agentd.mcp import eras, jsonrpc, sse
from agentd.mcp.port import CallContext, DeliveryResult
from agentd.mcp.transport_errors import map_transport_errors
from agentd.observability import tracing

_SNIPPET = 200
_ROUTING = {"mcp-method", "mcp-name", "content-length"}


@dataclass
class HttpDeliveryResult(DeliveryResult):
    """A DeliveryResult plus the HTTP details the wire log shows (secrets redacted)."""

    request_headers: dict[str, str] = field(default_factory=dict)
    response_headers: dict[str, str] = field(default_factory=dict)
    notifications: list[dict[str, Any]] = field(
        default_factory=list
    )  # SSE messages before the answer
    era: str | None = None


class HttpTransport:
    """Deliver JSON-RPC envelopes with POST; map `Mcp-Session-Id` to the port's `session_id`.

    The protocol era is detected on the first `initialize` (a `server/discover` probe) and
    remembered per URL on this instance; `era=` pins it. Safe for concurrent use: the only
    shared state is that era memo, and a race merely probes twice.
    """

    kind = "http"

    def __init__(
        self,
        url: str,
        *,
        api_token: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 60.0,
        era: eras.Era | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = url
        self.api_token = api_token
        self.headers = dict(headers or {})
        self.timeout = timeout
        self._client = client
        self._eras: dict[str, eras.Era] = {url: era} if era else {}

    def era(self) -> eras.Era | None:
        return self._eras.get(self.url)

    async def deliver(
        self,
        payload: dict[str, Any],
        *,
        session_id: str | None = None,
        context: CallContext | None = None,
    ) -> HttpDeliveryResult:
        era = self._eras.get(self.url)
        if payload.get("method") == "initialize" and era != "handshake":
            probe = await self._probe()
            if probe is not None:
                assert probe.body is not None  # _probe returns only answered discoveries
                body = jsonrpc.result(
                    payload.get("id"), eras.initialize_result_from_discovery(probe.body["result"])
                )
                return replace(probe, body=body, session_id=None)
            era = "handshake"
        elif era is None:
            era = "modern" if await self._probe() is not None else "handshake"
        if era == "modern":
            if jsonrpc.is_notification(payload):
                # Nothing to acknowledge in a stateless protocol; record it as not sent.
                return HttpDeliveryResult(
                    body=None, session_id=None, raw_request=jsonrpc.dumps(payload), raw_response="",
                    status=None, era="modern",
                )  # fmt: skip
            stamped, routing = eras.stamp(payload)
            return await self._post(stamped, None, routing, era="modern")
        return await self._post(payload, session_id, {}, era="handshake")

    async def _probe(self) -> HttpDeliveryResult | None:
        """POST `server/discover`: the exchange if the server speaks 2026-07-28, else None."""
        stamped, routing = eras.stamp(eras.discover_request())
        try:
            result = await self._post(stamped, None, routing, era=None, probing=True)
        except McpSessionInvalid:
            result = None
        modern = result is not None and eras.is_modern_discovery(result.body)
        self._eras[self.url] = "modern" if modern else "handshake"
        if not modern:
            return None
        assert result is not None
        result.era = "modern"
        return result

    async def _post(
        self,
        payload: dict[str, Any],
        session_id: str | None,
        extra_headers: dict[str, str],
        *,
        era: str | None,
        probing: bool = False,
    ) -> HttpDeliveryResult:
        raw_request = jsonrpc.dumps(payload)
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **self.headers,
        }
        if self.api_token:
            headers["Authorization"] = f"Bearer {self.api_token}"
        if session_id:
            headers["Mcp-Session-Id"] = session_id
        headers.update(extra_headers)
        tracing.inject(headers)  # W3C traceparent of the current MCP client span, if any
        expects_answer = not jsonrpc.is_notification(payload)
        started = time.monotonic()
        with map_transport_errors(self.url, timeout=self.timeout):
            async with asyncio.timeout(self.timeout), self._session() as client:
                request = client.build_request(
                    "POST", self.url, content=raw_request.encode(), headers=headers
                )
                response = await client.send(request, stream=True, follow_redirects=True)
                refused: list[str] = []

                async def answer(message: dict[str, Any]) -> None:
                    # A server→client request on the held stream (handshake era): refuse it
                    # at once, so the server's call fails instead of waiting on a person.
                    if message.get("method") != "ping":
                        refused.append(str(message.get("method")))
                    reply = jsonrpc.dumps(jsonrpc.refusal(message))
                    back = {k: v for k, v in headers.items() if k.lower() not in _ROUTING}
                    if sid := response.headers.get("mcp-session-id"):
                        back["Mcp-Session-Id"] = sid
                    with contextlib.suppress(httpx.HTTPError):
                        ack = await client.post(self.url, content=reply.encode(), headers=back)
                        await ack.aclose()

                try:
                    status = response.status_code
                    ctype = response.headers.get("content-type", "")
                    notes: list[dict[str, Any]] = []
                    if "text/event-stream" in ctype and status < 400:
                        raw_response, body, notes = await _read_sse(
                            response, payload.get("id"), answer
                        )
                    else:
                        raw_response = (await response.aread()).decode("utf-8", errors="replace")
                        body = _parse_json(raw_response)
                finally:
                    await response.aclose()
        duration = time.monotonic() - started
        result = HttpDeliveryResult(
            body=body if isinstance(body, dict) else None,
            session_id=response.headers.get("mcp-session-id") or session_id,
            raw_request=redact.text(raw_request),
            raw_response=redact.text(raw_response),
            status=status,
            duration=duration,
            request_headers=redact.headers(headers),
            response_headers=redact.headers(response.headers),
            notifications=notes,
            era=era,
            refused=refused,
        )
        if probing:
            return result
        self._check(result, session_id=session_id, expects_answer=expects_answer, parsed=body)
        return result

    def _check(
        self,
        result: HttpDeliveryResult,
        *,
        session_id: str | None,
        expects_answer: bool,
        parsed: Any,
    ) -> None:
        status = result.status or 0
        where = f"MCP server {self.url}"
        if status == 404 and session_id:
            raise McpSessionInvalid(f"{where} no longer knows session {session_id} (HTTP 404)")
        if status in (401, 403):
            raise McpError(f"{where} rejected the credentials (HTTP {status})", http_status=status)
        if parsed is _GARBAGE:
            snippet = result.raw_response[:_SNIPPET]
            raise McpError(
                f"{where} answered HTTP {status} with a non-JSON body: {snippet!r}",
                http_status=status,
            )
        if status >= 400 and not jsonrpc.is_response(parsed):
            raise McpError(
                f"{where} answered HTTP {status} without a JSON-RPC response", http_status=status
            )
        if expects_answer and not jsonrpc.is_response(parsed):
            raise McpError(
                f"{where} answered HTTP {status} without a JSON-RPC response", http_status=status
            )

    def _session(self) -> contextlib.AbstractAsyncContextManager[httpx.AsyncClient]:
        if self._client is not None:
            return contextlib.nullcontext(self._client)
        return httpx.AsyncClient(timeout=self.timeout)


_GARBAGE: Any = object()


def _parse_json(text: str) -> Any:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        return _GARBAGE


async def _read_sse(
    response: httpx.Response,
    request_id: Any,
    answer: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> tuple[str, Any, list[dict[str, Any]]]:
    """Read events until the response whose id matches `request_id`; earlier messages are
    notes, and server→client requests among them are answered through `answer`."""
    lines: list[str] = []
    parser = sse.EventParser()
    notes: list[dict[str, Any]] = []
    asks: list[dict[str, Any]] = []

    def take(event: sse.Event | None) -> Any:
        if event is None or not event.data.strip():
            return None
        try:
            message = json.loads(event.data)
        except ValueError as exc:
            raise McpError(
                f"MCP server sent a non-JSON SSE event: {event.data[:_SNIPPET]!r}"
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
            return "\n".join(lines) + "\n", found, notes
        while asks and answer is not None:
            await answer(asks.pop(0))
    if (found := take(parser.flush())) is not None:
        return "\n".join(lines), found, notes
    if request_id is None:
        return "\n".join(lines), None, notes
    raise McpError(f"MCP SSE stream ended without a response to request {request_id!r}")


async def _lines(response: httpx.Response) -> AsyncIterator[str]:
    async for line in response.aiter_lines():
        yield line

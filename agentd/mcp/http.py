"""`HttpTransport`: MCP over Streamable HTTP, JSON or SSE answers, both protocol eras."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from agentd import redact
from agentd.errors import McpError, McpSessionInvalid
from agentd.mcp import eras, http_stream, jsonrpc
from agentd.mcp.hub import McpHub
from agentd.mcp.port import CallContext, DeliveryResult
from agentd.mcp.transport_errors import map_transport_errors
from agentd.observability import tracing

_MAX_LIST_PAGES = 50
VERSION_HEADER = "MCP-Protocol-Version"


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

    The protocol era is detected with one `server/discover` probe per server URL per
    process (the hub's `server_facts.FactsBook`), not per transport object: transports are
    built per job. A session or era error forgets the verdict, so the next request re-probes.
    `era=` pins it for this instance. Safe for concurrent use: a race merely probes twice.

    Handshake era: every request after `initialize` carries `MCP-Protocol-Version` (the
    version the server chose). 2026-07-28: every request is stamped (`eras.stamp`) and a
    `tools/call` mirrors its `x-mcp-header` arguments into `Mcp-Param-*` headers.
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
        hub: McpHub | None = None,
    ) -> None:
        self.url = url
        self.api_token = api_token
        redact.current().remember(api_token)  # masked in every event and log, in any encoding
        self.headers = dict(headers or {})
        self.timeout = timeout
        self._client = client
        self._pinned = era
        # Without a hub this transport learns alone (tests, one-off clients).
        self._hub = hub if hub is not None else McpHub(http=client)
        self.facts = self._hub.facts

    def era(self) -> eras.Era | None:
        return self._pinned or self.facts.of(self.url).era

    async def deliver(
        self,
        payload: dict[str, Any],
        *,
        session_id: str | None = None,
        context: CallContext | None = None,
    ) -> HttpDeliveryResult:
        era = self.era()
        if payload.get("method") == "initialize" and era != "handshake":
            probe = await self._probe()
            if probe is not None:
                shaped = eras.initialize_result_from_discovery(_result_of(probe.body))
                body = jsonrpc.result(payload.get("id"), shaped)
                return replace(probe, body=body, session_id=None)
            era = "handshake"
        elif era is None:
            era = "modern" if await self._probe() is not None else "handshake"
        if era == "modern":
            return await self._deliver_modern(payload)
        return await self._deliver_handshake(payload, session_id)

    async def _deliver_handshake(
        self, payload: dict[str, Any], session_id: str | None
    ) -> HttpDeliveryResult:
        facts = self.facts.of(self.url)
        method = payload.get("method")
        extra: dict[str, str] = {}
        if method != "initialize":
            # 2025-06-18+: MUST on every request after initialize. A process that never
            # saw this server's initialize (a restart) sends the version it proposes.
            extra[VERSION_HEADER] = facts.protocol_version or eras.LATEST_HANDSHAKE_VERSION
        result = await self._post(payload, session_id, extra, era="handshake")
        if method == "initialize":
            chosen = _result_of(result.body).get("protocolVersion")
            if chosen in eras.HANDSHAKE_VERSIONS:
                self.facts.of(self.url).protocol_version = chosen
        return result

    async def _deliver_modern(self, payload: dict[str, Any]) -> HttpDeliveryResult:
        if jsonrpc.is_notification(payload):
            # Nothing to acknowledge in a stateless protocol; record it as not sent.
            return HttpDeliveryResult(
                body=None, session_id=None, raw_request=jsonrpc.dumps(payload), raw_response="",
                status=None, era="modern",
            )  # fmt: skip
        method = payload.get("method")
        params = payload.get("params") or {}
        stamped, base = eras.stamp(payload)
        routing = dict(base)
        if method == "tools/call" and isinstance(params, dict):
            routing.update(await self._param_headers(params))
        result = await self._post(stamped, None, routing, era="modern")
        err = jsonrpc.error_of(result.body)
        if (
            err is not None
            and err.get("code") == eras.HEADER_MISMATCH
            and method == "tools/call"
            and isinstance(params, dict)
        ):
            # Our x-mcp-header map may predate a change of the tool: list again, retry once.
            self.facts.of(self.url).param_headers = None
            routing = {**base, **await self._param_headers(params)}
            result = await self._post(stamped, None, routing, era="modern")
            err = jsonrpc.error_of(result.body)
        if err is not None and err.get("code") == eras.UNSUPPORTED_PROTOCOL_VERSION:
            if eras.MODERN_VERSION in eras.supported_versions(err):
                # Spurious (the server lists our version): retry once, as the spec asks.
                result = await self._post(stamped, None, routing, era="modern")
            else:
                self.facts.forget(self.url)
                raise McpSessionInvalid(
                    f"MCP server {self.url} no longer speaks {eras.MODERN_VERSION} "
                    f"({jsonrpc.describe_error(err)})"
                )
        elif _lost_stateless(result):
            # Answered like a handshake-era server asking for a session: it was replaced.
            self.facts.forget(self.url)
            raise McpSessionInvalid(
                f"MCP server {self.url} asks for a session now (HTTP {result.status})"
            )
        if method == "tools/list":
            tools = _result_of(result.body).get("tools")
            if isinstance(tools, list):
                first = not (isinstance(params, dict) and params.get("cursor"))
                self.facts.remember_tools(self.url, tools, first_page=first)
        return result

    async def terminate(self, session_id: str) -> bool:
        """`DELETE` a handshake-era session; True when the server ended it (2xx)."""
        headers = dict(self.headers)
        if self.api_token:
            headers["Authorization"] = f"Bearer {self.api_token}"
        headers["Mcp-Session-Id"] = session_id
        facts = self.facts.of(self.url)
        headers[VERSION_HEADER] = facts.protocol_version or eras.LATEST_HANDSHAKE_VERSION
        with map_transport_errors(self.url, timeout=self.timeout):
            async with asyncio.timeout(self.timeout), self._session() as client:
                response = await client.delete(self.url, headers=headers)
        return 200 <= response.status_code < 300

    async def _param_headers(self, params: dict[str, Any]) -> dict[str, str]:
        """`Mcp-Param-*` for this call; lists the tools first if this process never did."""
        if self.facts.of(self.url).param_headers is None:
            cursor: str | None = None
            for page in range(_MAX_LIST_PAGES):
                listing = jsonrpc.request("tools/list", {"cursor": cursor} if cursor else {})
                stamped, routing = eras.stamp(listing)
                answer = await self._post(stamped, None, routing, era="modern")
                result = _result_of(answer.body)
                tools = result.get("tools")
                self.facts.remember_tools(
                    self.url, tools if isinstance(tools, list) else [], first_page=page == 0
                )
                cursor = result.get("nextCursor")
                if not isinstance(cursor, str) or not cursor:
                    break
        name, arguments = str(params.get("name")), params.get("arguments")
        return self.facts.param_headers(self.url, name, arguments)

    async def _probe(self) -> HttpDeliveryResult | None:
        """POST `server/discover`: the exchange if the server speaks 2026-07-28, else None.

        Single-flight per URL and credentials: loops that start together share one probe."""
        key = (self.url, self.api_token)
        flights = self.facts.probes
        flight = flights.get(key)
        if flight is None:
            flight = flights[key] = asyncio.ensure_future(self._probe_once())
            flight.add_done_callback(lambda _: flights.pop(key, None))
        return await asyncio.shield(flight)

    async def _probe_once(self) -> HttpDeliveryResult | None:
        facts = self.facts.of(self.url)
        result: HttpDeliveryResult | None = None
        for attempt in range(2):
            stamped, routing = eras.stamp(eras.discover_request())
            facts.probes += 1
            try:
                result = await self._post(stamped, None, routing, era=None, probing=True)
            except McpSessionInvalid:
                result = None
            err = jsonrpc.error_of(result.body if result else None)
            if (
                attempt == 0
                and err is not None
                and err.get("code") == eras.UNSUPPORTED_PROTOCOL_VERSION
                and eras.MODERN_VERSION in eras.supported_versions(err)
            ):
                continue  # "unsupported" yet it lists ours: retry with it (SEP-2575)
            break
        modern = result is not None and eras.is_modern_discovery(result.body)
        status = (result.status or 0) if result is not None else 0
        if modern or (result is not None and status < 500 and status not in (401, 403)):
            facts.era = "modern" if modern else "handshake"
        # else: a broken server, or refused credentials, say nothing about its era; this
        # request tries the handshake and the next one probes again.
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
                    routing = http_stream.ROUTING
                    back = {k: v for k, v in headers.items() if k.lower() not in routing}
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
                        raw_response, body, notes, resume = await http_stream.read_sse(
                            response, payload.get("id"), answer
                        )
                        if resume is not None:
                            raw_response, body = await http_stream.resume(
                                self.url, client, headers, response, payload.get("id"), answer,
                                resume, raw_response, notes,
                            )  # fmt: skip
                    else:
                        raw_response = (await response.aread()).decode("utf-8", errors="replace")
                        body = http_stream.parse_json(raw_response)
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
            self.facts.forget(self.url)  # restarted, maybe upgraded: probe again
            raise McpSessionInvalid(f"{where} no longer knows session {session_id} (HTTP 404)")
        if status == 400 and session_id and "protocol version" in result.raw_response.lower():
            self.facts.forget(self.url)  # our remembered version is not the server's
            raise McpSessionInvalid(f"{where} refused protocol version (HTTP 400)")
        if status in (401, 403):
            raise McpError(f"{where} rejected the credentials (HTTP {status})", http_status=status)
        if parsed is http_stream.GARBAGE:
            snippet = result.raw_response[: http_stream.SNIPPET]
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
        return contextlib.nullcontext(self._client or self._hub.client_for(self.url))


def _result_of(body: dict[str, Any] | None) -> dict[str, Any]:
    result = body.get("result") if isinstance(body, dict) else None
    return result if isinstance(result, dict) else {}


def _lost_stateless(result: HttpDeliveryResult) -> bool:
    """A stateless request answered the way handshake servers refuse a missing session."""
    if result.status not in (400, 404):
        return False
    err = jsonrpc.error_of(result.body) or {}
    said = str(err.get("message") or result.raw_response).lower()
    return "session" in said

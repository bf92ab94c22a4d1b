"""McpEndpoint: one toolset served to external MCP clients over Streamable HTTP (the
scope, guarantees and eras are described in `agentd.api.mcp_server`)."""

from __future__ import annotations

import datetime
import hashlib
import inspect
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mcp.shared import inbound
from mcp_types.jsonrpc import HEADER_MISMATCH
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from agentd import event_names, logs, redact
from agentd.api import mcp_http
from agentd.db import pool as dbpool
from agentd.mcp import eras, jsonrpc
from agentd.mcp.mounts import McpMount
from agentd.mcp.port import CallContext
from agentd.store import events
from agentd.store import mcp as mcp_store
from agentd.store.models import NewEvent

if TYPE_CHECKING:
    from agentd.api.state import AppState

log = logs.get("agentd.api.mcp_server")

SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
#: Methods the 2026-07-28 protocol removed; answered -32601 / 404 in that era.
REMOVED_IN_MODERN = frozenset(
    {"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}
)
_VISIBLE_ASCII = re.compile(r"^[\x21-\x7E]{1,255}$")


@dataclass
class _Call:
    """One HTTP request on its way through; what its event will say."""

    request: Request
    principal: object  # what the mount's authorizer returned
    label: str
    started: float
    raw_request: str = ""
    rpc_method: str | None = None
    era: str = "handshake"
    row_id: int | None = None
    notes: list[str] = field(default_factory=list)


class McpEndpoint:
    """Pure ASGI app serving `mount.toolset` at one path (`/mcp/<name>`)."""

    def __init__(self, name: str, mount: McpMount, state: AppState) -> None:
        self.name = name
        self.mount = mount
        self.state = state  # AppState (or anything with .pool and .settings), read per request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self._respond(request)
        await response(scope, receive, send)

    # -- the gate ------------------------------------------------------------------------

    async def _respond(self, request: Request) -> Response:
        refused = self._check_host_and_origin(request)
        if refused is not None:
            return refused
        try:
            principal = await self._authorize(request)
        except Exception:
            log.exception("mcp_server.authorizer_failed", server=self.name)
            return Response(status_code=500)
        if principal is None:
            where = mcp_http.resource_metadata_url(request, self.name)
            challenge = f'Bearer resource_metadata="{where}"'
            return Response(status_code=401, headers={"WWW-Authenticate": challenge})
        call = _Call(request, principal, mcp_http.principal_label(principal), time.monotonic())
        if request.method == "DELETE":
            return await self._terminate(call)
        if request.method != "POST":
            return Response(status_code=405, headers={"Allow": "POST, DELETE"})
        content_type = request.headers.get("content-type", "")
        if not content_type.lower().startswith("application/json"):
            return Response("Content-Type must be application/json", status_code=415)
        body = await mcp_http.read_body(request, self.state.settings.max_body_bytes)
        if body is None:
            return Response("Request body too large", status_code=413)
        call.raw_request = body.decode("utf-8", errors="replace")
        try:
            envelope = jsonrpc.loads(body)
        except jsonrpc.NotJson as exc:
            # NaN / Infinity: never run a tool on it, never echo it back.
            message = f"Invalid Request: {exc}"
            return mcp_http.json_answer(jsonrpc.error(None, jsonrpc.INVALID_REQUEST, message), 400)
        except (ValueError, RecursionError):
            return mcp_http.json_answer(
                jsonrpc.error(None, jsonrpc.PARSE_ERROR, "Parse error"), 400
            )
        if isinstance(envelope, list):
            message = "Batch requests are not supported"
            return mcp_http.json_answer(jsonrpc.error(None, jsonrpc.INVALID_REQUEST, message), 400)
        invalid = jsonrpc.invalid_envelope(envelope)
        if invalid is not None:
            message = f"Invalid Request: {invalid}"
            return mcp_http.json_answer(
                jsonrpc.error(mcp_http.valid_id(envelope), jsonrpc.INVALID_REQUEST, message), 400
            )
        call.rpc_method = envelope.get("method")
        version = request.headers.get(VERSION_HEADER)
        if version is None or version in eras.HANDSHAKE_VERSIONS:
            return await self._serve_handshake(call, envelope)
        if version == eras.MODERN_VERSION or request.headers.get(SESSION_HEADER) is None:
            call.era = "modern"  # the SDK's ladder answers an unknown version there
            return await self._serve_modern(call, envelope)
        # A session request naming a version nobody speaks: say so (not the 2026 _meta error).
        data = {"supported": [*eras.HANDSHAKE_VERSIONS, eras.MODERN_VERSION], "requested": version}
        message = f"Unsupported protocol version: {version}"
        body_ = jsonrpc.error(
            mcp_http.request_id(envelope), eras.UNSUPPORTED_PROTOCOL_VERSION, message, data
        )
        return mcp_http.json_answer(body_, 400)

    def _check_host_and_origin(self, request: Request) -> Response | None:
        """DNS-rebinding protection: Host must be local or allowed; so must Origin, if sent."""
        hosts = self.mount.allowed_hosts
        if "*" not in hosts and not mcp_http.host_allowed(request.headers.get("host"), hosts):
            return Response("Invalid Host header", status_code=421)
        origin = request.headers.get("origin")
        origins = self.mount.allowed_origins
        if origin and "*" not in origins and not mcp_http.origin_allowed(origin, origins):
            return Response("Invalid Origin header", status_code=403)
        return None

    async def _authorize(self, request: Request) -> object:
        header = request.headers.get("authorization", "")
        scheme, _, credentials = header.partition(" ")
        token = credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None
        principal = self.mount.authorizer(token, request)
        if inspect.isawaitable(principal):
            principal = await principal
        return principal

    # -- handshake era -------------------------------------------------------------------

    async def _serve_handshake(self, call: _Call, envelope: dict[str, Any]) -> Response:
        if envelope.get("method") == "initialize" and "id" in envelope:
            return await self._initialize(call, envelope)
        session_id = call.request.headers.get(SESSION_HEADER)
        if not session_id:
            message = "Bad Request: Mcp-Session-Id header is required"
            return mcp_http.json_answer(
                jsonrpc.error(mcp_http.request_id(envelope), jsonrpc.INVALID_REQUEST, message), 400
            )
        async with dbpool.connection(self.state.pool) as conn:
            row = await mcp_store.touch_inbound(
                conn, server_name=self.name, session_id=session_id, principal=call.label
            )
        if row is None:
            return mcp_http.json_answer(
                jsonrpc.error(
                    mcp_http.request_id(envelope), jsonrpc.INVALID_REQUEST, "Session not found"
                ),
                404,
            )
        call.row_id = row["id"]
        if jsonrpc.is_notification(envelope) or jsonrpc.is_response(envelope):
            return await self._answer(call, Response(status_code=202))
        ctx = CallContext(principal=call.principal)
        body = await self._dispatch(call, envelope, session_id, ctx)
        return await self._answer(call, mcp_http.json_answer(body, 200))

    async def _initialize(self, call: _Call, envelope: dict[str, Any]) -> Response:
        body, minted = await self._dispatch_minting(call, envelope)
        if jsonrpc.error_of(body) is not None:
            return mcp_http.json_answer(body, 200)  # no session was created, so nothing to record
        session_id = minted or uuid.uuid4().hex
        if not _VISIBLE_ASCII.fullmatch(session_id):
            log.error("mcp_server.bad_minted_session_id", server=self.name)
            message = "Internal error: invalid session id"
            return mcp_http.json_answer(
                jsonrpc.error(mcp_http.request_id(envelope), jsonrpc.INTERNAL_ERROR, message), 500
            )
        result = body["result"] if isinstance(body, dict) else {}
        response = mcp_http.json_answer(body, 200, headers={"Mcp-Session-Id": session_id})
        async with dbpool.transaction(self.state.pool) as conn:
            row = await mcp_store.insert_inbound(
                conn,
                server_name=self.name,
                session_id=session_id,
                principal=call.label,
                protocol_version=result.get("protocolVersion"),
            )
            if row is not None:
                call.row_id = row["id"]
                await events.insert_many(conn, [self._event(call, response)])
        if row is None:
            log.error("mcp_server.session_id_taken", server=self.name)
            message = "Internal error: session id already in use"
            return mcp_http.json_answer(
                jsonrpc.error(mcp_http.request_id(envelope), jsonrpc.INTERNAL_ERROR, message), 500
            )
        return response

    async def _terminate(self, call: _Call) -> Response:
        session_id = call.request.headers.get(SESSION_HEADER)
        if not session_id:
            return Response("Mcp-Session-Id header is required", status_code=400)
        async with dbpool.connection(self.state.pool) as conn:
            row = await mcp_store.terminate_inbound(
                conn, server_name=self.name, session_id=session_id, principal=call.label
            )
        if row is None:
            return Response("Session not found", status_code=404)
        call.row_id = row["id"]
        call.rpc_method = "terminate"
        return await self._answer(call, Response(status_code=200))

    # -- 2026-07-28 era ------------------------------------------------------------------

    async def _serve_modern(self, call: _Call, envelope: dict[str, Any]) -> Response:
        call.row_id = await self._pseudo_session(call)
        request_id = mcp_http.request_id(envelope)
        if jsonrpc.is_notification(envelope) or jsonrpc.is_response(envelope):
            version = call.request.headers.get(VERSION_HEADER, "")
            rejection = inbound.unsupported_protocol_version_rejection(version)
            if rejection is not None:
                return await self._answer(call, mcp_http.rejection(rejection, None))
            return await self._answer(call, Response(status_code=202))
        duplicated = inbound.find_duplicated_routing_header(call.request.headers.items())
        if duplicated is not None:
            rejection = inbound.InboundLadderRejection(
                code=HEADER_MISMATCH, message=f"{duplicated} header appears more than once"
            )
            return await self._answer(call, mcp_http.rejection(rejection, request_id))
        # Field values exclude optional whitespace (RFC 9110 §5.5); not every server strips it.
        headers = {k: v.strip() for k, v in call.request.headers.items()}
        verdict = inbound.classify_inbound_request(envelope, headers=headers)
        if isinstance(verdict, inbound.InboundLadderRejection):
            return await self._answer(call, mcp_http.rejection(verdict, request_id))
        method = envelope["method"]
        if method in REMOVED_IN_MODERN:
            message = f"Method not found: {method}"
            body = jsonrpc.error(request_id, jsonrpc.METHOD_NOT_FOUND, message)
            return await self._answer(call, mcp_http.json_answer(body, 404))
        rejection = self._param_header_rejection(call, envelope)
        if rejection is not None:
            return await self._answer(call, mcp_http.rejection(rejection, request_id))
        ctx = CallContext(principal=call.principal)
        body = await self._dispatch(call, envelope, None, ctx)
        result = body.get("result") if isinstance(body, dict) else None
        if isinstance(result, dict):
            eras.stamp_result(method, result, mcp_http.server_info(self.mount.toolset))
        err = jsonrpc.error_of(body)
        code = err.get("code") if err else None
        status = inbound.ERROR_CODE_HTTP_STATUS.get(code, 200) if isinstance(code, int) else 200
        return await self._answer(call, mcp_http.json_answer(body, status))

    async def _pseudo_session(self, call: _Call) -> int:
        """The row for this principal's stateless requests today (UTC)."""
        day = datetime.datetime.now(datetime.UTC).date().isoformat()
        digest = hashlib.sha256(call.label.encode()).hexdigest()[:16]
        session_id = f"stateless:{self.name}:{digest}:{day}"
        async with dbpool.connection(self.state.pool) as conn:
            row = await mcp_store.upsert_stateless_inbound(
                conn,
                server_name=self.name,
                session_id=session_id,
                principal=call.label,
                protocol_version=eras.MODERN_VERSION,
            )
        return int(row["id"])

    def _param_header_rejection(
        self, call: _Call, envelope: dict[str, Any]
    ) -> inbound.InboundLadderRejection | None:
        """`Mcp-Param-*` headers must agree with the arguments they mirror (x-mcp-header)."""
        params = envelope.get("params") or {}
        if envelope.get("method") != "tools/call" or not isinstance(params, dict):
            return None
        spec = getattr(self.mount.toolset, "tools", {}).get(params.get("name"))
        arguments = params.get("arguments") or {}
        if spec is None or not isinstance(arguments, dict):
            return None
        return inbound.validate_mcp_param_headers(
            spec.handler.schema, arguments, call.request.headers
        )

    # -- dispatch and audit --------------------------------------------------------------

    async def _dispatch(
        self, call: _Call, envelope: dict[str, Any], session_id: str | None, ctx: CallContext
    ) -> dict[str, Any]:
        try:
            body, _ = await self.mount.toolset.handle(envelope, session_id=session_id, context=ctx)
        except Exception as exc:
            # Tool exceptions are already isError results; this is the dispatcher itself.
            log.exception("mcp_server.dispatch_failed", server=self.name, method=call.rpc_method)
            call.notes.append(f"dispatch failed: {type(exc).__name__}")
            body = jsonrpc.error(
                mcp_http.request_id(envelope), jsonrpc.INTERNAL_ERROR, "Internal error"
            )
        return body or {}

    async def _dispatch_minting(
        self, call: _Call, envelope: dict[str, Any]
    ) -> tuple[dict[str, Any], str | None]:
        ctx = CallContext(principal=call.principal)
        try:
            body, minted = await self.mount.toolset.handle(envelope, session_id=None, context=ctx)
        except Exception:
            log.exception("mcp_server.initialize_failed", server=self.name)
            body = jsonrpc.error(
                mcp_http.request_id(envelope), jsonrpc.INTERNAL_ERROR, "Internal error"
            )
            minted = None
        return body or {}, minted

    async def _answer(self, call: _Call, response: Response) -> Response:
        """Commit the request's event, then hand back the response to send."""
        if call.row_id is not None:
            async with dbpool.connection(self.state.pool) as conn:
                await events.insert_many(conn, [self._event(call, response)])
        return response

    def _event(self, call: _Call, response: Response) -> NewEvent:
        request = call.request
        raw_response = bytes(response.body).decode("utf-8", errors="replace")
        request_headers = redact.headers(dict(request.headers))
        response_headers = redact.headers(dict(response.headers))
        duration = time.monotonic() - call.started
        lines = [
            f"> {request.method} {request.url.path} ({call.era} era)",
            *(f"> {k}: {v}" for k, v in request_headers.items()),
            f"< {response.status_code} in {duration * 1000:.1f} ms",
            *(f"< {k}: {v}" for k, v in response_headers.items()),
            f"principal: {call.label}",
            *call.notes,
        ]
        return NewEvent(
            name=event_names.wire_name("mcp_inbound", call.rpc_method or request.method.lower()),
            inbound_session_id=call.row_id,
            http_method=request.method,
            url=request.url.path,
            status=response.status_code,
            request_data={"raw": call.raw_request, "headers": request_headers},
            response_data={"raw": raw_response, "headers": response_headers},
            duration=duration,
            log="\n".join(lines),
        )

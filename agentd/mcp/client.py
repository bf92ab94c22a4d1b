"""`McpClient`: builds MCP envelopes for one server and delegates I/O to its transport."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING, Any

from agentd import logs
from agentd.errors import McpError, McpSessionInvalid
from agentd.mcp import eras, jsonrpc, listing, outcomes
from agentd.mcp.config import McpServerConfig
from agentd.mcp.hub import McpHub
from agentd.mcp.port import (
    IDEMPOTENCY_META_KEY,
    CallContext,
    DeliveryResult,
    Transport,
    idempotency_key,
)
from agentd.mcp.records import Exchange, McpTool, SessionInfo, ToolOutcome
from agentd.mcp.transports import transport_for
from agentd.observability import tracing

if TYPE_CHECKING:
    import httpx

log = logs.get("agentd.mcp.client")

PREFIX_SEPARATOR = listing.PREFIX_SEPARATOR
TOOLS_CHANGED = "notifications/tools/list_changed"
STATELESS_PREFIX = "stateless-"  # marks a session id agentd made up; never sent on the wire
_MAX_PAGES = 50
CANCEL_NOTICE_SECONDS = 2.0  # how long a cancelled call waits to tell its server


def is_synthetic(session_id: str | None) -> bool:
    return session_id is None or session_id.startswith(STATELESS_PREFIX)


class McpClient:
    def __init__(
        self,
        config: McpServerConfig,
        transport: Transport | None = None,
        *,
        http: httpx.AsyncClient | None = None,
        hub: McpHub | None = None,
    ) -> None:
        self.config = config
        #: the process's (engine/runtime.py); without one this client shares nothing
        self.hub = hub if hub is not None else McpHub(http=http)
        if transport is None:
            transport = transport_for(config, http=http or self.hub.http, hub=self.hub)
        self.transport = transport

    @property
    def transport_kind(self) -> str:
        return str(getattr(self.transport, "kind", "custom"))

    # -- session -----------------------------------------------------------------------

    async def initialize(self, context: CallContext | None = None) -> SessionInfo:
        exchanges: list[Exchange] = []
        params = {
            "protocolVersion": eras.LATEST_HANDSHAKE_VERSION,
            "capabilities": {},
            "clientInfo": eras.CLIENT_INFO,
        }
        # Made up front so the handshake's spans carry the id a stateless server's session
        # will have (mcp.session.id on every MCP span); a server's own id replaces it.
        synthetic = f"{STATELESS_PREFIX}{uuid.uuid4().hex}"
        result, delivery = await self._request(
            "initialize", params, None, context, exchanges, span_session=synthetic
        )
        real = delivery.session_id
        session_id = real or synthetic
        await self._deliver(
            jsonrpc.notification("notifications/initialized"),
            real,
            context,
            exchanges,
            span_session=session_id,
        )
        capabilities = result.get("capabilities") or {}
        metadata: dict[str, Any] = {
            "capabilities": capabilities,
            "serverInfo": result.get("serverInfo") or {},
            "protocolVersion": result.get("protocolVersion"),
        }
        if result.get("instructions"):
            metadata["instructions"] = result["instructions"]
        # Best-effort discovery: a broken prompts/resources endpoint must not take tools down.
        for capability, method, key in (
            ("prompts", "prompts/list", "prompts"),
            ("resources", "resources/list", "resources"),
        ):
            if capability in capabilities:
                try:
                    listed, _ = await self._request(method, {}, session_id, context, exchanges)
                    metadata[key] = listed.get(key, [])
                except McpError as exc:
                    metadata[f"{key}_error"] = exc.message
        return SessionInfo(session_id, metadata, exchanges, stateless=real is None)

    # -- tools -------------------------------------------------------------------------

    async def list_tools(
        self, session_id: str | None, context: CallContext | None = None
    ) -> tuple[list[McpTool], list[Exchange]]:
        exchanges: list[Exchange] = []
        remote: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            params = {"cursor": cursor} if cursor else {}
            result, _delivery = await self._request(
                "tools/list", params, session_id, context, exchanges
            )
            remote.extend(
                t for t in result.get("tools") or [] if isinstance(t, dict) and "name" in t
            )
            cursor = result.get("nextCursor")
            if not cursor:
                break
        tools = listing.tools_of(self.config, remote)
        return tools, exchanges

    def advertised_name(self, remote_name: str) -> str:
        return listing.advertised_name(self.config, remote_name)

    async def call_tool(
        self,
        remote_name: str,
        arguments: dict[str, Any] | None,
        *,
        session_id: str,
        context: CallContext | None = None,
        input_responses: dict[str, Any] | None = None,
        request_state: str | None = None,
        task: dict[str, Any] | None = None,
        input_schema: dict[str, Any] | None = None,
    ) -> ToolOutcome:
        """One `tools/call`. `input_responses`/`request_state` retry a call that answered
        with an InputRequiredResult (2026-07-28); `task` asks for task-augmented execution.
        `input_schema` (the advertised one) tells a -32602 about the model's arguments
        from one about a request agentd malformed."""
        exchanges: list[Exchange] = []
        params: dict[str, Any] = {"name": remote_name, "arguments": arguments or {}}
        key = _idempotency_key_of(context)
        if key:
            params["_meta"] = {IDEMPOTENCY_META_KEY: key}
        if input_responses is not None:
            params["inputResponses"] = input_responses
        if request_state is not None:
            params["requestState"] = request_state
        if task is not None:
            params["task"] = task
        sessions = self.hub.sessions
        shared = self.config.session == "process"
        if shared:  # another loop of this process may have recovered the shared session
            session_id = sessions.current(self.config) or session_id
        used = session_id
        if not session_id and self._ends_sessions:
            # No stored session: agentd ended it with DELETE after the loop finished, and
            # the loop was continued since. Open a new one; the caller stores its id.
            session = await self.initialize(context)
            exchanges.extend(session.exchanges)
            session_id = session.session_id
        payload = jsonrpc.request("tools/call", params)
        try:
            delivery = await self._deliver(payload, session_id, context, exchanges)
        except asyncio.CancelledError:
            await self._cancelled(payload, session_id, context)
            raise
        except McpSessionInvalid:
            if self.config.session_recovery == "fail":
                raise
            session = await self.initialize(context)
            exchanges.extend(session.exchanges)
            session_id = session.session_id
            delivery = await self._deliver(
                jsonrpc.request("tools/call", params), session_id, context, exchanges
            )
        if shared and session_id != used:  # every loop of the process uses the new one
            sessions.replaced(self.config, used, session_id)
        elif self.config.session == "auto" and is_synthetic(used) and not is_synthetic(session_id):
            sessions.now_stateful(self.config)  # it issues session ids now: stop sharing it
        outcome = outcomes.outcome(delivery.body, session_id, exchanges, refused=delivery.refused)
        if outcomes.is_client_bug(outcome.error_code, arguments, input_schema):
            log.error(
                "mcp_client.request_rejected", server=self.config.name, tool=remote_name,
                method="tools/call", code=outcome.error_code, error=outcome.text,
            )  # fmt: skip
            outcome.client_error = outcome.error_code
            outcome.text = outcomes.CLIENT_BUG_TEXT.format(error=outcome.text)
        return outcome

    async def _cancelled(
        self, payload: dict[str, Any], session_id: str | None, context: CallContext | None
    ) -> None:
        """The caller gave up on a request (an interrupt, pause, stop or timeout): tell the
        server with `notifications/cancelled`, best effort, within CANCEL_NOTICE_SECONDS.
        Only over HTTP: a stdio server's process is ended with the call, and an in-process
        toolset's handler is the very task being cancelled."""
        if self.transport_kind != "http":
            return
        note = jsonrpc.notification(
            "notifications/cancelled",
            {"requestId": payload.get("id"), "reason": "cancelled by the client"},
        )
        wire = None if is_synthetic(session_id) else session_id
        send = asyncio.ensure_future(self.transport.deliver(note, session_id=wire, context=context))
        try:
            await asyncio.wait_for(asyncio.shield(send), CANCEL_NOTICE_SECONDS)
        except (Exception, asyncio.CancelledError):  # best effort: the call is gone anyway
            send.cancel()
            log.debug("mcp_client.cancel_notice_failed", server=self.config.name)

    @property
    def _ends_sessions(self) -> bool:
        """Can this transport end a session (HTTP `DELETE`)? stdio and in-process cannot."""
        return callable(getattr(self.transport, "terminate", None))

    async def terminate(self, session_id: str | None) -> bool:
        """End a handshake-era session (HTTP `DELETE`); False when there was nothing to end.

        Best effort: a server that does not allow it (405) or already forgot the session
        (404) is not an error."""
        end = getattr(self.transport, "terminate", None)
        if is_synthetic(session_id) or not callable(end):
            return False
        try:
            return bool(await end(session_id))
        except McpError as exc:
            log.info("mcp_client.terminate_failed", server=self.config.name, error=exc.message)
            return False

    # -- tasks -------------------------------------------------------------------------

    async def get_task(
        self, task_id: str, *, session_id: str, context: CallContext | None = None
    ) -> tuple[dict[str, Any], list[Exchange]]:
        """`tasks/get`: the task's current state (`status`, `pollInterval`, ...)."""
        exchanges: list[Exchange] = []
        result, _ = await self._request(
            "tasks/get", {"taskId": task_id}, session_id, context, exchanges
        )
        return result, exchanges

    async def task_result(
        self, task_id: str, *, session_id: str, context: CallContext | None = None
    ) -> ToolOutcome:
        """`tasks/result`: the finished task's `tools/call` result, as an outcome."""
        exchanges: list[Exchange] = []
        delivery = await self._deliver(
            jsonrpc.request("tasks/result", {"taskId": task_id}), session_id, context, exchanges
        )
        return outcomes.outcome(delivery.body, session_id, exchanges, refused=delivery.refused)

    # -- prompts & resources -------------------------------------------------------------

    async def list_prompts(
        self, session_id: str, context: CallContext | None = None
    ) -> list[dict[str, Any]]:
        result, _ = await self._request("prompts/list", {}, session_id, context, [])
        return list(result.get("prompts") or [])

    async def get_prompt(
        self,
        session_id: str,
        name: str,
        arguments: dict[str, str] | None = None,
        context: CallContext | None = None,
    ) -> dict[str, Any]:
        result, _ = await self._request(
            "prompts/get", {"name": name, "arguments": arguments or {}}, session_id, context, []
        )
        return result

    async def list_resources(
        self, session_id: str, context: CallContext | None = None
    ) -> list[dict[str, Any]]:
        result, _ = await self._request("resources/list", {}, session_id, context, [])
        return list(result.get("resources") or [])

    async def read_resource(
        self, session_id: str, uri: str, context: CallContext | None = None
    ) -> dict[str, Any]:
        result, _ = await self._request("resources/read", {"uri": uri}, session_id, context, [])
        return result

    # -- plumbing ----------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        params: dict[str, Any],
        session_id: str | None,
        context: CallContext | None,
        exchanges: list[Exchange],
        *,
        span_session: str | None = None,
    ) -> tuple[dict[str, Any], DeliveryResult]:
        delivery = await self._deliver(
            jsonrpc.request(method, params),
            session_id,
            context,
            exchanges,
            span_session=span_session,
        )
        body = delivery.body
        if (err := jsonrpc.error_of(body)) is not None:
            raise McpError(
                f"MCP server {self.config.name!r} answered {method} with "
                f"{jsonrpc.describe_error(err)}"
            )
        result = body.get("result") if body else None
        if not isinstance(result, dict):
            raise McpError(
                f"MCP server {self.config.name!r} answered {method} without a result object"
            )
        return result, delivery

    async def _deliver(
        self,
        payload: dict[str, Any],
        session_id: str | None,
        context: CallContext | None,
        exchanges: list[Exchange],
        *,
        span_session: str | None = None,
    ) -> DeliveryResult:
        wire_session = None if is_synthetic(session_id) else session_id
        method = str(payload.get("method"))
        started = time.monotonic()
        try:
            # mcp.session.id: the session as agentd knows it, agentd's own id for a server
            # without sessions (stdio, in-process, stateless HTTP) included.
            shown = session_id or span_session
            with tracing.span(**self._span_of(payload, shown)) as span:
                try:
                    delivery = await self.transport.deliver(
                        payload, session_id=wire_session, context=context
                    )
                except Exception as exc:
                    tracing.fail(span, type(exc).__name__)
                    raise
                if delivery.session_id and delivery.session_id != shown:  # initialize
                    span.set_attribute("mcp.session.id", delivery.session_id)
                if (err := jsonrpc.error_of(delivery.body)) is not None:
                    tracing.fail(span, str(err.get("code")), jsonrpc.describe_error(err))
        except Exception as exc:
            exchanges.append(
                Exchange(
                    server=self.config.name, method=method, raw_request=jsonrpc.dumps(payload),
                    raw_response="", status=None, stderr=None, duration=time.monotonic() - started,
                    session_id=session_id, error=str(exc) or type(exc).__name__,
                )
            )  # fmt: skip
            raise
        for note in getattr(delivery, "notifications", None) or []:
            if isinstance(note, dict) and note.get("method") == TOOLS_CHANGED:
                self.hub.sessions.tools_changed(self.config)  # later loops list them again
        exchanges.append(
            Exchange(
                server=self.config.name, method=method, raw_request=delivery.raw_request,
                raw_response=delivery.raw_response, status=delivery.status, stderr=delivery.stderr,
                duration=delivery.duration or time.monotonic() - started, session_id=session_id,
                request_headers=dict(getattr(delivery, "request_headers", {}) or {}),
                response_headers=dict(getattr(delivery, "response_headers", {}) or {}),
            )
        )  # fmt: skip
        return delivery

    def _span_of(self, payload: dict[str, Any], session: str | None) -> dict[str, Any]:
        """An MCP client span, after the semantic conventions: `{method} {tool}` for tools/call."""
        method = str(payload.get("method"))
        params = payload.get("params") or {}
        tool = params.get("name") if method == "tools/call" else None
        return {
            "name": f"{method} {tool}" if tool else method,
            "client": True,
            "attributes": {
                "mcp.method.name": method,
                "mcp.session.id": session,
                "jsonrpc.request.id": str(payload["id"]) if "id" in payload else None,
                "gen_ai.tool.name": tool,
                "agentd.mcp.server": self.config.name,
                "agentd.mcp.transport": self.transport_kind,
            },
        }


def _idempotency_key_of(context: CallContext | None) -> str | None:
    if context is None:
        return None
    if context.idempotency_key:
        return context.idempotency_key
    return idempotency_key(context.tool_call_id) if context.tool_call_id is not None else None

"""`Toolset`: an in-process MCP server declared with decorators; it is its own transport.

`tool` and `prompt` (agentd.tool / agentd.prompt) mark functions for `Toolset.include`.

`deliver` (and the transport-free `handle`) dispatch initialize / server/discover /
notifications / ping / tools/list / tools/call / prompts/list / prompts/get. The JSON
boundary is kept: the payload is serialised and parsed again, so local and remote
behaviour cannot drift.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

import pydantic

from agentd.errors import ToolArgumentsInvalid
from agentd.json_types import JSONValue
from agentd.mcp import eras, jsonrpc, marks, tool_names
from agentd.mcp.handlers import Handler
from agentd.mcp.marks import prompt, tool
from agentd.mcp.port import IDEMPOTENCY_META_KEY, CallContext, DeliveryResult

if TYPE_CHECKING:
    pass

REQUIRES_APPROVAL_META_KEY = "agentd/requiresApproval"

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class ToolSpec:
    name: str
    description: str
    handler: Handler
    requires_approval: bool = False

    def listing(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.handler.schema,
        }
        if self.requires_approval:
            entry["_meta"] = {REQUIRES_APPROVAL_META_KEY: True}
        return entry


@dataclass
class PromptSpec:
    name: str
    description: str
    arguments: list[dict[str, Any]]
    handler: Handler

    def listing(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "arguments": self.arguments}


class _ProtocolError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Toolset:
    """An in-process MCP server (`kind="local"`).

    ```python
    billing = Toolset("billing")

    @billing.tool(description="Look up a customer")
    async def lookup(customer_id: str, ctx: CallContext) -> dict: ...
    ```
    """

    kind = "local"

    def __init__(
        self, name: str, *, version: str = "0.0.0", instructions: str | None = None
    ) -> None:
        self.name = name
        self.version = version
        self.instructions = instructions
        self.tools: dict[str, ToolSpec] = {}
        self.prompts: dict[str, PromptSpec] = {}
        self._on_initialize: Handler | None = None

    # -- declaration -------------------------------------------------------------------

    @overload
    def tool(
        self,
        fn: F,
        *,
        name: str | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
        requires_approval: bool = False,
    ) -> F: ...

    @overload
    def tool(
        self,
        fn: None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
        requires_approval: bool = False,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        fn: F | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
        requires_approval: bool = False,
    ) -> F | Callable[[F], F]:
        """Register `fn` as a tool (`@toolset.tool` or `@toolset.tool(name=...)`)."""

        def register(func: F) -> F:
            tool_name = name or func.__name__
            reason = tool_names.refusal(tool_name)
            if reason is not None:
                raise ValueError(
                    f"toolset {self.name!r}: tool name {tool_names.shown(tool_name)} refused: "
                    f"{reason} (MCP tool names: 1-128 of A-Z a-z 0-9 _ - .)"
                )
            if tool_name in self.tools:
                raise ValueError(f"toolset {self.name!r} already has a tool {tool_name!r}")
            handler = Handler(func, input_schema=input_schema, raw=False)
            desc = description if description is not None else (func.__doc__ or "").strip()
            self.tools[tool_name] = ToolSpec(tool_name, desc, handler, requires_approval)
            return func

        return register(fn) if fn is not None else register

    @overload
    def prompt(
        self,
        fn: F,
        *,
        name: str | None = None,
        description: str | None = None,
        arguments: list[dict[str, Any]] | None = None,
    ) -> F: ...

    @overload
    def prompt(
        self,
        fn: None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        arguments: list[dict[str, Any]] | None = None,
    ) -> Callable[[F], F]: ...

    def prompt(
        self,
        fn: F | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        arguments: list[dict[str, Any]] | None = None,
    ) -> F | Callable[[F], F]:
        """Register `fn` as a prompt (`@toolset.prompt` or `@toolset.prompt(name=...)`)."""

        def register(func: F) -> F:
            prompt_name = name or func.__name__
            desc = description if description is not None else (func.__doc__ or "").strip()
            handler = Handler(func, input_schema=None, raw=True)
            self.prompts[prompt_name] = PromptSpec(
                prompt_name, desc, list(arguments or []), handler
            )
            return func

        return register(fn) if fn is not None else register

    def include(self, *fns: Callable[..., Any]) -> Toolset:
        """Register functions marked with the module-level `agentd.tool` / `agentd.prompt`."""
        for fn in fns:
            spec = getattr(fn, marks.TOOL_MARK, None)
            if spec is not None:
                self.tool(fn, **spec)
                continue
            spec = getattr(fn, marks.PROMPT_MARK, None)
            if spec is None:
                raise ValueError(f"{fn!r} is not marked with @agentd.tool or @agentd.prompt")
            self.prompt(fn, **spec)
        return self

    def on_initialize(self, fn: F) -> F:
        """Register `fn(params, ctx) -> str | None`; a returned string becomes the session id."""
        self._on_initialize = Handler(fn, input_schema=None, raw=True)
        return fn

    # -- the port ----------------------------------------------------------------------

    async def deliver(
        self,
        payload: dict[str, Any],
        *,
        session_id: str | None = None,
        context: CallContext | None = None,
    ) -> DeliveryResult:
        started = time.monotonic()
        raw_request = jsonrpc.dumps(payload)
        envelope = json.loads(raw_request)  # keep the JSON boundary
        body, minted = await self.handle(envelope, session_id=session_id, context=context)
        return DeliveryResult(
            body=body,
            session_id=minted if envelope.get("method") == "initialize" else session_id,
            raw_request=raw_request,
            raw_response=jsonrpc.dumps(body) if body is not None else "",
            status=200 if body is not None else 202,
            duration=time.monotonic() - started,
        )

    async def handle(
        self,
        envelope: object,
        *,
        session_id: str | None = None,
        context: CallContext | None = None,
    ) -> tuple[dict[str, Any] | None, str | None]:
        """Dispatch one parsed envelope: (response or None for notifications, minted session id)."""
        if not isinstance(envelope, dict) or not isinstance(envelope.get("method"), str):
            return jsonrpc.error(_id_of(envelope), jsonrpc.INVALID_REQUEST, "Invalid Request"), None
        if jsonrpc.is_notification(envelope):
            return None, None
        request_id = envelope["id"]
        params = envelope.get("params") or {}
        ctx = _context_for(context, params, session_id)
        try:
            if not isinstance(params, dict):
                raise _ProtocolError(jsonrpc.INVALID_PARAMS, "params must be an object")
            method = envelope["method"]
            minted = None
            if method == "initialize":
                result, minted = await self._initialize(params, ctx)
            elif method == "server/discover":
                result = self._discover()
            elif method == "ping":
                result = {}
            elif method == "tools/list":
                result = {"tools": [spec.listing() for spec in self.tools.values()]}
            elif method == "tools/call":
                result = await self._call_tool(params, ctx)
            elif method == "prompts/list" and self.prompts:
                result = {"prompts": [spec.listing() for spec in self.prompts.values()]}
            elif method == "prompts/get" and self.prompts:
                result = await self._get_prompt(params, ctx)
            else:
                raise _ProtocolError(jsonrpc.METHOD_NOT_FOUND, f"Method not found: {method}")
        except _ProtocolError as exc:
            return jsonrpc.error(request_id, exc.code, exc.message), None
        return jsonrpc.result(request_id, result), minted

    # -- methods -----------------------------------------------------------------------

    def capabilities(self) -> dict[str, Any]:
        """What this toolset serves; `prompts` only when prompts are declared."""
        capabilities: dict[str, Any] = {"tools": {"listChanged": False}}
        if self.prompts:
            capabilities["prompts"] = {"listChanged": False}
        return capabilities

    def server_info(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}

    def _discover(self) -> dict[str, Any]:
        # The 2026-07-28 probe: no session, so nothing is minted and on_initialize is not run.
        result: dict[str, Any] = {
            "supportedVersions": [eras.MODERN_VERSION],
            "capabilities": self.capabilities(),
        }
        if self.instructions:
            result["instructions"] = self.instructions
        result["_meta"] = {eras.META_SERVER_INFO: self.server_info()}
        return result

    async def _initialize(
        self, params: dict[str, Any], ctx: CallContext
    ) -> tuple[dict[str, Any], str | None]:
        requested = params.get("protocolVersion")
        version = (
            requested if requested in eras.HANDSHAKE_VERSIONS else eras.LATEST_HANDSHAKE_VERSION
        )
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": self.capabilities(),
            "serverInfo": self.server_info(),
        }
        if self.instructions:
            result["instructions"] = self.instructions
        minted = None
        if self._on_initialize is not None:
            value = await self._on_initialize.call(self._on_initialize.validate(params), ctx)
            minted = str(value) if value is not None else None
        return result, minted

    async def _call_tool(self, params: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        name = params.get("name")
        spec = self.tools.get(name) if isinstance(name, str) else None
        if spec is None:
            raise _ProtocolError(jsonrpc.INVALID_PARAMS, f"Unknown tool: {name}")
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            return tool_error(f"Invalid arguments for tool {name!r}: arguments must be an object")
        try:
            kwargs = spec.handler.validate(arguments)
        except ToolArgumentsInvalid as exc:
            return tool_error(f"Invalid arguments for tool {name!r}: {exc.message}")
        try:
            value = await spec.handler.call(kwargs, ctx)
        except Exception as exc:
            return tool_error(str(exc) or type(exc).__name__)
        try:
            return tool_result(value)
        except (TypeError, ValueError) as exc:
            return tool_error(f"Tool {name!r} returned a value that is not JSON: {exc}")

    async def _get_prompt(self, params: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        name = params.get("name")
        spec = self.prompts.get(name) if isinstance(name, str) else None
        if spec is None:
            raise _ProtocolError(jsonrpc.INVALID_PARAMS, f"Unknown prompt: {name}")
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise _ProtocolError(jsonrpc.INVALID_PARAMS, "arguments must be an object")
        missing = [
            a["name"] for a in spec.arguments if a.get("required") and a["name"] not in arguments
        ]
        if missing:
            raise _ProtocolError(
                jsonrpc.INVALID_PARAMS, f"Missing required argument(s): {', '.join(missing)}"
            )
        try:
            value = await spec.handler.call(spec.handler.validate(arguments), ctx)
        except Exception as exc:
            raise _ProtocolError(jsonrpc.INTERNAL_ERROR, str(exc) or type(exc).__name__) from exc
        if isinstance(value, str):
            messages = [{"role": "user", "content": {"type": "text", "text": value}}]
        else:
            messages = list(value)
        result: dict[str, Any] = {"messages": messages}
        if spec.description:
            result["description"] = spec.description
        return result


def tool_result(value: object) -> dict[str, Any]:
    """str → text; dict (or pydantic model) → JSON text and structuredContent; None → no content."""
    if isinstance(value, pydantic.BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, str):
        return {"content": [{"type": "text", "text": value}], "isError": False}
    if value is None:
        return {"content": [], "isError": False}
    text = json.dumps(value, ensure_ascii=False)
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if isinstance(value, dict):
        result["structuredContent"] = json.loads(text)
    return result


def tool_error(message: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": message}], "isError": True}


def _id_of(envelope: object) -> JSONValue:
    return envelope.get("id") if isinstance(envelope, dict) else None


def _context_for(
    context: CallContext | None, params: object, session_id: str | None
) -> CallContext:
    base = context or CallContext()
    meta = params.get("_meta") if isinstance(params, dict) else None
    key = meta.get(IDEMPOTENCY_META_KEY) if isinstance(meta, dict) else None
    extra = {"session_id": session_id} if session_id else {}
    return dataclasses.replace(
        base,
        idempotency_key=key if isinstance(key, str) else base.idempotency_key,
        meta={**base.meta, **(meta if isinstance(meta, dict) else {}), **extra},
    )


__all__ = ["REQUIRES_APPROVAL_META_KEY", "PromptSpec", "ToolSpec", "Toolset", "prompt", "tool"]

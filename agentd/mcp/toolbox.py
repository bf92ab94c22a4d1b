"""`open_toolbox`: initialise all of an agent's MCP servers at once and index their tools."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentd.errors import ConfigError, McpError, UnknownTool
from agentd.mcp.client import McpClient
from agentd.mcp.config import McpServerConfig
from agentd.mcp.hub import McpHub
from agentd.mcp.outcomes import runs_tasks
from agentd.mcp.port import CallContext
from agentd.mcp.records import Exchange, McpTool, ToolOutcome
from agentd.mcp.shared_sessions import Opened

if TYPE_CHECKING:
    import httpx


@dataclass
class ServerSession:
    server: str
    session_id: str
    transport_kind: str
    metadata: dict[str, Any]
    stateless: bool


@dataclass
class Toolbox:
    tools: list[McpTool]
    sessions: dict[str, ServerSession]
    clients: dict[str, McpClient]
    exchanges: list[Exchange] = field(default_factory=list)

    def find(self, advertised_name: str) -> McpTool | None:
        return next((t for t in self.tools if t.name == advertised_name), None)

    def get(self, advertised_name: str) -> McpTool:
        tool = self.find(advertised_name)
        if tool is None:
            raise UnknownTool(f"No tool named {advertised_name!r} is advertised to this agent")
        return tool

    async def call(
        self,
        advertised_name: str,
        arguments: dict[str, Any] | None,
        *,
        context: CallContext | None = None,
    ) -> ToolOutcome:
        """Call a tool by its advertised name; a recovered session replaces the stored one."""
        tool = self.get(advertised_name)
        session = self.sessions[tool.server]
        outcome = await self.clients[tool.server].call_tool(
            tool.remote_name, arguments, session_id=session.session_id, context=context
        )
        session.session_id = outcome.session_id
        return outcome


async def open_toolbox(
    configs: list[McpServerConfig],
    context: CallContext | None = None,
    *,
    http: httpx.AsyncClient | None = None,
    hub: McpHub | None = None,
) -> Toolbox:
    """Open `configs`' servers at once. `hub`: the process's (sessions and listings shared
    by `session = "process"` / `"auto"`); without one, nothing is shared."""
    names = [c.name for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"MCP server names must be unique per agent: {', '.join(duplicates)}")
    hub = hub if hub is not None else McpHub(http=http)
    clients = {c.name: McpClient(c, http=http, hub=hub) for c in configs}
    results = await asyncio.gather(
        *(_open(client, context) for client in clients.values()), return_exceptions=True
    )
    for config, result in zip(configs, results, strict=True):
        if isinstance(result, McpError):
            raise type(result)(
                f"MCP server {config.name!r} failed to initialise: {result.message}"
            ) from result
        if isinstance(result, BaseException):
            raise result
    tools: list[McpTool] = []
    owner: dict[str, str] = {}
    sessions: dict[str, ServerSession] = {}
    exchanges: list[Exchange] = []
    for config, result in zip(configs, results, strict=True):
        assert not isinstance(result, BaseException)
        info, server_tools, tool_exchanges = result
        exchanges.extend(info.exchanges + tool_exchanges)
        sessions[config.name] = ServerSession(
            config.name,
            info.session_id,
            clients[config.name].transport_kind,
            info.metadata,
            info.stateless,
        )
        for tool in server_tools:
            if tool.name in owner:
                raise McpError(
                    f"Tool name {tool.name!r} is advertised by both MCP servers "
                    f"{owner[tool.name]!r} and"
                    f" {config.name!r}; give one of them a prefix",
                    retryable=False,  # a configuration problem, not an outage
                )
            owner[tool.name] = config.name
            tools.append(tool)
    return Toolbox(tools=tools, sessions=sessions, clients=clients, exchanges=exchanges)


async def _open(client: McpClient, context: CallContext | None) -> Opened:
    config, sessions = client.config, client.hub.sessions
    if config.url is None or config.session == "loop":
        return await _open_new(client, context)  # only HTTP sessions are ever shared
    if config.session == "process":
        return await _shared(sessions.open_shared(config, lambda: _open_new(client, context)))
    # "auto": the first open tells; a server that issues a session id keeps one per loop.
    if not sessions.stateful(config):
        opened = await sessions.open_shared(
            config, lambda: _open_new(client, context, cached=True), share=lambda i: i.stateless
        )
        if opened is not None:
            return opened
    return await _open_new(client, context, cached=True)


async def _shared(opening: Awaitable[Opened | None]) -> Opened:
    opened = await opening
    assert opened is not None  # "process" shares whatever the server answers
    return opened


async def _open_new(
    client: McpClient, context: CallContext | None, *, cached: bool = False
) -> Opened:
    """A session of the loop's own; `cached`: its tools from the process's listing of this
    server at this version when there is one (no `tools/list` then)."""
    info = await client.initialize(context)
    sessions = client.hub.sessions
    tools = sessions.listing(client.config, info) if cached else None
    exchanges: list[Exchange] = []
    if tools is None:
        tools, exchanges = await client.list_tools(info.session_id, context)
        if cached:
            sessions.keep_listing(client.config, info, tools)
    if runs_tasks(info.metadata.get("capabilities") or {}):
        # Stored with the session: ToolExecution asks these tools for task execution.
        task_tools = {t.remote_name: t.task_support for t in tools if t.task_support}
        if task_tools:
            info.metadata["taskTools"] = task_tools
    return info, tools, exchanges

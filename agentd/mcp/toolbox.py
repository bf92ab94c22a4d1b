"""`open_toolbox`: initialise all of an agent's MCP servers at once and index their tools."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentd.errors import ConfigError, McpError, UnknownTool
from agentd.mcp import shared_sessions
from agentd.mcp.client import McpClient, runs_tasks
from agentd.mcp.config import McpServerConfig
from agentd.mcp.port import CallContext
from agentd.mcp.records import Exchange, McpTool, SessionInfo, ToolOutcome

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
) -> Toolbox:
    names = [c.name for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"MCP server names must be unique per agent: {', '.join(duplicates)}")
    clients = {c.name: McpClient(c, http=http) for c in configs}
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


async def _open(
    client: McpClient, context: CallContext | None
) -> tuple[SessionInfo, list[McpTool], list[Exchange]]:
    if client.config.session == "process":
        return await shared_sessions.open_shared(client.config, lambda: _open_new(client, context))
    return await _open_new(client, context)


async def _open_new(
    client: McpClient, context: CallContext | None
) -> tuple[SessionInfo, list[McpTool], list[Exchange]]:
    info = await client.initialize(context)
    tools, exchanges = await client.list_tools(info.session_id, context)
    if runs_tasks(info.metadata.get("capabilities") or {}):
        # Stored with the session: ToolExecution asks these tools for task execution.
        task_tools = {t.remote_name: t.task_support for t in tools if t.task_support}
        if task_tools:
            info.metadata["taskTools"] = task_tools
    return info, tools, exchanges

"""ToolDiscovery: opens the agent's MCP servers and records their sessions and tools.

Position: before NetworkCalling. Reads: ctx.agent. Writes: mcp_sessions, mcp_tools (fenced
by the turn's token), ctx.tools, ctx.tool_specs. Finalizer: no.
Discovery runs on a loop's first turn (with refresh_mcp_tools) or when the loop has no
sessions yet; later turns read the stored tools, so a prompt's tool list stays stable.
The stored sessions and tools come prefetched by the claim (ctx.prefetch) when it has them.
"""

from __future__ import annotations

from typing import Any

from agentd.agent import resolve
from agentd.db.pool import connection, transaction
from agentd.engine.context import TurnContext
from agentd.errors import FenceLost
from agentd.llm.types import ToolSpec
from agentd.mcp.config import McpServerConfig
from agentd.mcp.port import CallContext
from agentd.pipeline.builder import Handler
from agentd.pipeline.wire import mcp_events
from agentd.store import events, loops, mcp


async def agent_mcp_configs(agent: Any) -> list[McpServerConfig]:
    entries = await resolve(agent.mcp_servers())
    return [e if isinstance(e, McpServerConfig) else McpServerConfig.parse(e) for e in entries]


class ToolDiscovery:
    def __init__(self, app: Handler[TurnContext]) -> None:
        self.app = app

    async def __call__(self, ctx: TurnContext) -> None:
        assert ctx.agent is not None
        configs = await agent_mcp_configs(ctx.agent)
        ctx.metadata["mcp_timeouts"] = [c.timeout for c in configs]
        if configs:
            pre = ctx.prefetch
            if pre is not None:  # the claim read them; a steady-state turn queries nothing
                sessions, rows = pre.mcp_sessions, pre.mcp_tools
            else:
                async with connection(ctx.runtime.pool) as conn:
                    sessions = await mcp.list_sessions(conn, loop_id=ctx.loop.id)
                    rows = await mcp.list_tools(conn, loop_id=ctx.loop.id)
            fresh = ctx.loop.step_count == 0 and ctx.agent.refresh_mcp_tools
            known = {s["mcp_name"] for s in sessions}
            if fresh or known != {c.name for c in configs}:
                rows = await self._discover(ctx, configs)
            ctx.tools = rows
            ctx.tool_specs = [
                ToolSpec(
                    name=t.name,
                    description=t.description or "",
                    input_schema=t.input_schema or {"type": "object"},
                )
                for t in rows
            ]
        await self.app(ctx)

    async def _discover(self, ctx: TurnContext, configs: list[McpServerConfig]) -> list[Any]:
        from agentd.mcp.toolbox import open_toolbox

        assert ctx.agent is not None
        context = CallContext(
            agent=ctx.agent, loop=ctx.loop_view, principal=ctx.agent.mcp_principal
        )
        box = await open_toolbox(configs, context, http=ctx.runtime.mcp_http)
        async with transaction(ctx.runtime.pool) as conn:
            current = await loops.get_for_update(conn, loop_id=ctx.loop.id)
            if current is None or current.execution_token != ctx.execution_token:
                raise FenceLost()
            session_rows: dict[str, int] = {}
            for name, s in box.sessions.items():
                session_rows[name] = await mcp.upsert_session(
                    conn,
                    loop_id=ctx.loop.id,
                    mcp_name=name,
                    session_id=s.session_id,
                    transport_kind=s.transport_kind,
                    metadata=s.metadata,
                )
            await mcp.replace_tools(
                conn,
                loop_id=ctx.loop.id,
                tools=[
                    {
                        "session_row_id": session_rows[t.server],
                        "name": t.name,
                        "remote_name": t.remote_name,
                        "description": t.description,
                        "input_schema": t.input_schema,
                        "requires_approval": t.requires_approval,
                    }
                    for t in box.tools
                ],
            )
            await events.insert_many(conn, mcp_events(box.exchanges, loop_id=ctx.loop.id))
            return await mcp.list_tools(conn, loop_id=ctx.loop.id)

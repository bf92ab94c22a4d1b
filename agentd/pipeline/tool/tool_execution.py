"""ToolExecution: invokes the tool once and checkpoints its result.

Position: after ApprovalGate, before ResponseCreation. Writes: the `executed_at`
checkpoint with the result, fenced by this call's lease token (zero rows: FenceLost).
A call already checkpointed is replayed, never re-invoked (invariant 4). Invalid
arguments, unknown tools, MCP `isError`, transport failures and timeouts all become error
results the model sees. Always calls downstream. Finalizer: yes — replacing this forfeits
the fences.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agentd.db.pool import transaction
from agentd.engine.context import ToolContext
from agentd.errors import FenceLost, McpError, ToolError
from agentd.mcp.client import McpClient
from agentd.mcp.port import CallContext, idempotency_key
from agentd.pipeline.builder import Handler
from agentd.pipeline.llm.tool_discovery import agent_mcp_configs
from agentd.pipeline.wire import mcp_events
from agentd.store import mcp, tool_calls


class ToolExecution:
    def __init__(self, app: Handler[ToolContext]) -> None:
        self.app = app

    async def __call__(self, ctx: ToolContext) -> None:
        tc = ctx.tool_call
        if tc.executed_at is not None:
            ctx.metadata["replayed"] = True
            await self.app(ctx)
            return
        started = time.monotonic()
        structured: Any = None
        error: str | None = None
        new_session: str | None = None
        if ctx.skip is not None:
            result, ok = ctx.skip
        elif tc.arguments is None:
            result, ok = (
                (
                    f"Invalid arguments for {tc.name}: expected a JSON object, got "
                    f"{(tc.arguments_raw or '')[:500]!r}. Call it again with valid JSON."
                ),
                False,
            )
        elif ctx.tool is None:
            result, ok = (f"Unknown tool {tc.name!r}: no such tool is available to you."), False
        else:
            result, ok, structured, new_session = await self._invoke(ctx)
        if not ok:
            error = result
        async with transaction(ctx.runtime.pool) as conn:
            row = await tool_calls.checkpoint(
                conn,
                tool_call_id=tc.id,
                lease_token=ctx.lease_token,
                result=result,
                structured=structured,
                is_success=ok,
                error_message=error,
                duration=time.monotonic() - started,
            )
            if row is None:
                raise FenceLost()
            if new_session is not None and ctx.tool is not None:
                await mcp.set_session_id(
                    conn, loop_id=tc.loop_id, mcp_name=ctx.tool.mcp_name, session_id=new_session
                )
        ctx.tool_call = row
        await self.app(ctx)

    async def _invoke(self, ctx: ToolContext) -> tuple[str, bool, Any, str | None]:
        tc = ctx.tool_call
        tool = ctx.tool
        agent = ctx.agent
        assert tool is not None and agent is not None and ctx.loop is not None
        configs = {c.name: c for c in await agent_mcp_configs(agent)}
        config = configs.get(tool.mcp_name)
        if config is None:
            return (
                (
                    f"Tool {tc.name} is no longer available (MCP server {tool.mcp_name!r} "
                    "was removed from the agent)."
                ),
                False,
                None,
                None,
            )
        client = McpClient(config)
        context = CallContext(
            agent=agent,
            loop=ctx.loop,
            principal=agent.mcp_principal,
            idempotency_key=idempotency_key(tc.id),
            tool_call_id=tc.id,
        )
        limit = max(ctx.runtime.settings.default_tool_timeout, config.timeout)
        try:
            async with asyncio.timeout(limit):
                outcome = await client.call_tool(
                    tool.remote_name,
                    tc.arguments,
                    session_id=tool.session_id or "",
                    context=context,
                )
        except TimeoutError:
            return f"Tool {tc.name} timed out after {limit:g}s.", False, None, None
        except (McpError, ToolError) as exc:
            ctx.events.extend(
                mcp_events(
                    getattr(exc, "exchanges", []) or [], loop_id=tc.loop_id, tool_call_id=tc.id
                )
            )
            return f"Tool {tc.name} failed: {exc.message}", False, None, None
        ctx.events.extend(mcp_events(outcome.exchanges, loop_id=tc.loop_id, tool_call_id=tc.id))
        session = outcome.session_id if outcome.session_id != tool.session_id else None
        return outcome.text, not outcome.is_error, outcome.structured, session

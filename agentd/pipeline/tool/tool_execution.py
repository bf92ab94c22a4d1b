"""ToolExecution: invokes the tool once and checkpoints its result.

Position: after ApprovalGate, before ResponseCreation. Writes: the `executed_at`
checkpoint with the result, fenced by this call's lease token (zero rows: FenceLost). When
the stack builder found the stock ResponseCreation right after it (`response_next`, decided
once per stack, pipeline/stacks.py), the checkpoint is folded into that one statement
instead (ctx.checkpoint): result and response commit together. With a middleware in
between, or a recovered MCP session id to store, the checkpoint commits first, on its own.
A call already checkpointed is replayed, never re-invoked (invariant 4). A result over
`max_tool_result_bytes` is cut, with a marker saying so, before it is stored. Invalid
arguments, unknown tools, MCP `isError`, transport failures and timeouts all become error
results the model sees. Finalizer: yes — replacing this forfeits the fences.

Waiting on the world (agentd.pipeline.tool.waiting): an MCP InputRequiredResult parks the
call for a person and a task-augmented call schedules its next poll; both hold the step
(`ctx.held`, downstream not called) and write no result. A redelivered call retries
`tools/call` with the recorded answers, or polls its task (`tasks/get`, then `tasks/result`).
Otherwise always calls downstream.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

from agentd import agent_tools
from agentd.agent import agent_mcp_configs
from agentd.db.pool import connection, transaction
from agentd.engine import children
from agentd.engine.context import ToolContext
from agentd.errors import FenceLost, McpError, ToolError
from agentd.mcp.client import McpClient
from agentd.mcp.outcomes import TASK_TERMINAL
from agentd.mcp.port import CallContext, idempotency_key
from agentd.mcp.records import ToolOutcome
from agentd.pipeline.builder import Handler
from agentd.pipeline.tool import waiting
from agentd.pipeline.wire import mcp_events
from agentd.states import InputStatus, ToolCallOutcome, ToolCallStatus
from agentd.store import mcp, tool_calls

#: ctx.error_type of an isError result of the tool itself (MCP conventions).
TOOL_ERROR = "tool_error"


class ToolExecution:
    def __init__(self, app: Handler[ToolContext], *, response_next: bool = False) -> None:
        self.app = app
        # The stock ResponseCreation runs right after this middleware (the stack builder
        # says so): nothing in between may observe, or crash after, a checkpoint.
        self.response_next = response_next

    async def __call__(self, ctx: ToolContext) -> None:
        tc = ctx.tool_call
        if tc.executed_at is not None:
            ctx.replayed = True
            if not tc.is_success:
                ctx.error_type = ctx.error_type or TOOL_ERROR
            ctx.runtime.telemetry.tool_call_outcome(
                ctx, ToolCallOutcome.COMPLETED if tc.is_success else ToolCallOutcome.ERROR
            )
            await self.app(ctx)
            return
        started = time.monotonic()
        structured: Any = None
        error: str | None = None
        new_session: str | None = None
        if ctx.skip is not None:
            result, ok = ctx.skip
            ctx.error_type = "skipped"
        elif tc.arguments is None:
            ctx.error_type = "ToolArgumentsInvalid"
            result, ok = (
                (
                    f"Invalid arguments for {tc.name}: expected a JSON object, got "
                    f"{(tc.arguments_raw or '')[:500]!r}. Call it again with valid JSON."
                ),
                False,
            )
        elif ctx.tool is None:
            ctx.error_type = "UnknownTool"
            result, ok = (f"Unknown tool {tc.name!r}: no such tool is available to you."), False
        else:
            if ctx.tool.mcp_name == agent_tools.SERVER:  # an agent tool: a child loop
                invoked = await children.call(ctx)
            else:
                invoked = await self._invoke(ctx)
            if invoked is None:  # parked for a person or a child, or the task polls later
                return
            result, ok, structured, new_session = invoked
        limit = ctx.runtime.settings.max_tool_result_bytes
        result, structured = cap_result(result, limit), cap_structured(structured, limit)
        if not ok:
            error = result
            # The span's error.type (engine.scopes): what failed, set by the path that knew;
            # an isError result of the tool itself is `tool_error` (MCP conventions).
            ctx.error_type = ctx.error_type or TOOL_ERROR
        else:
            ctx.error_type = None
        duration = time.monotonic() - started
        if new_session is None and self.response_next:
            # Nothing runs between here and the (stock) response: record the result in the same
            # statement as the response (one round trip). Any middleware in between (which
            # may observe, or crash after, the checkpoint) gets the separate checkpoint.
            ctx.checkpoint = tool_calls.Checkpoint(
                result=result,
                structured=structured,
                is_success=ok,
                error_message=error,
                duration=duration,
            )
            ctx.tool_call = tc.replace(
                result=result,
                structured_result=structured,
                is_success=ok,
                error_message=error,
                duration=duration,
                status=ToolCallStatus.COMPLETED if ok else ToolCallStatus.FAILED,
            )
            await self.app(ctx)
            return
        # One statement, autocommitted, unless a recovered MCP session id is stored with it.
        scope = transaction if new_session is not None else connection
        async with scope(ctx.runtime.pool) as conn:
            row = await tool_calls.checkpoint(
                conn,
                tool_call_id=tc.id,
                lease_token=ctx.lease_token,
                result=result,
                structured=structured,
                is_success=ok,
                error_message=error,
                duration=duration,
            )
            if row is None:
                raise FenceLost()
            if new_session is not None and ctx.tool is not None:
                await mcp.set_session_id(
                    conn, loop_id=tc.loop_id, mcp_name=ctx.tool.mcp_name, session_id=new_session
                )
        ctx.tool_call = row
        ctx.runtime.telemetry.tool_call_outcome(
            ctx, ToolCallOutcome.COMPLETED if ok else ToolCallOutcome.ERROR
        )
        await self.app(ctx)

    async def _invoke(self, ctx: ToolContext) -> tuple[str, bool, Any, str | None] | None:
        tc = ctx.tool_call
        tool = ctx.tool
        agent = ctx.agent
        assert tool is not None and agent is not None and ctx.loop is not None
        configs = {c.name: c for c in await agent_mcp_configs(agent)}
        config = configs.get(tool.mcp_name)
        if config is None:
            ctx.error_type = "UnknownTool"
            return (
                (
                    f"Tool {tc.name} is no longer available (MCP server {tool.mcp_name!r} "
                    "was removed from the agent)."
                ),
                False,
                None,
                None,
            )
        client = McpClient(config, hub=ctx.runtime.mcp)
        context = CallContext(
            agent=agent,
            loop=ctx.loop,
            principal=agent.mcp_principal,
            idempotency_key=idempotency_key(tc.id),
            tool_call_id=tc.id,
        )
        limit = max(ctx.runtime.settings.default_tool_timeout, config.timeout)
        answer = tc.input_response if tc.input_status == InputStatus.ANSWERED else None
        try:
            async with asyncio.timeout(limit):
                if tc.task_id is not None:
                    return await self._poll_task(ctx, client, context)
                outcome = await client.call_tool(
                    tool.remote_name,
                    tc.arguments,
                    session_id=tool.session_id or "",
                    context=context,
                    input_responses=answer.get("inputResponses") if answer else None,
                    request_state=answer.get("requestState") if answer else None,
                    task=self._task_request(ctx) if answer is None else None,
                    input_schema=tool.input_schema,
                )
                if outcome.client_error is not None:  # agentd's bug, logged by the client
                    ctx.runtime.telemetry.mcp_client_error(
                        server=tool.mcp_name, code=outcome.client_error
                    )
                if outcome.input_required is not None or outcome.task is not None:
                    return await self._wait(ctx, client, context, outcome)
        except TimeoutError:
            ctx.error_type = "ToolTimeout"
            return f"Tool {tc.name} timed out after {limit:g}s.", False, None, None
        except (McpError, ToolError) as exc:
            ctx.error_type = type(exc).__name__
            ctx.events.extend(
                mcp_events(
                    getattr(exc, "exchanges", []) or [], loop_id=tc.loop_id, tool_call_id=tc.id
                )
            )
            return f"Tool {tc.name} failed: {exc.message}", False, None, None
        ctx.events.extend(mcp_events(outcome.exchanges, loop_id=tc.loop_id, tool_call_id=tc.id))
        session = outcome.session_id if outcome.session_id != tool.session_id else None
        return outcome.text, not outcome.is_error, outcome.structured, session

    # -- waiting on the world ------------------------------------------------------------

    def _task_request(self, ctx: ToolContext) -> dict[str, Any] | None:
        """Ask for task execution when the tool's server runs tasks (else call normally)."""
        if ctx.tool is None or ctx.tool.task_support not in ("optional", "required"):
            return None
        return {"ttl": int(ctx.runtime.settings.mcp_task_max_duration * 1000)}

    async def _wait(
        self, ctx: ToolContext, client: McpClient, context: CallContext, outcome: ToolOutcome
    ) -> tuple[str, bool, Any, str | None] | None:
        tc = ctx.tool_call
        ctx.events.extend(mcp_events(outcome.exchanges, loop_id=tc.loop_id, tool_call_id=tc.id))
        if outcome.input_required is not None:
            requests = outcome.input_required.get("inputRequests") or {}
            odd = sorted(
                {str(r.get("method")) if isinstance(r, dict) else "?" for r in requests.values()}
                - {"elicitation/create"}
            )
            if odd:
                return (
                    f"Tool {tc.name} failed: the MCP server asked for {', '.join(odd)}, "
                    "which agentd does not provide (only elicitation is answered).",
                    False,
                    None,
                    None,
                )
            if not requests:
                return (
                    f"Tool {tc.name} failed: the MCP server asked for input without saying "
                    "what it needs.",
                    False,
                    None,
                    None,
                )
            await waiting.park_for_input(ctx, outcome.input_required)
            return None
        task = outcome.task or {}
        since = datetime.now(UTC).isoformat()
        return await self._after_task_state(
            ctx, client, context, str(task["taskId"]), {**task, "agentd/since": since}, first=True
        )

    async def _poll_task(
        self, ctx: ToolContext, client: McpClient, context: CallContext
    ) -> tuple[str, bool, Any, str | None] | None:
        tc = ctx.tool_call
        assert tc.task_id is not None
        since = (tc.task_state or {}).get("agentd/since")
        try:
            state, exchanges = await client.get_task(
                tc.task_id, session_id=_session(ctx),
                context=context,
            )  # fmt: skip
        except McpError as exc:
            ctx.events.extend(
                mcp_events(
                    getattr(exc, "exchanges", []) or [], loop_id=tc.loop_id, tool_call_id=tc.id
                )
            )
            return (
                f"Tool {tc.name} failed: its MCP task {tc.task_id} could not be checked: "
                f"{exc.message}",
                False,
                None,
                None,
            )
        ctx.events.extend(mcp_events(exchanges, loop_id=tc.loop_id, tool_call_id=tc.id))
        return await self._after_task_state(
            ctx, client, context, tc.task_id, {**state, "agentd/since": since}, first=False
        )

    async def _after_task_state(
        self,
        ctx: ToolContext,
        client: McpClient,
        context: CallContext,
        task_id: str,
        state: dict[str, Any],
        *,
        first: bool,
    ) -> tuple[str, bool, Any, str | None] | None:
        tc = ctx.tool_call
        settings = ctx.runtime.settings
        status = state.get("status")
        if status == "input_required":
            return (
                f"Tool {tc.name} failed: its MCP task {task_id} asked for user input, which "
                "agentd supports only as an InputRequiredResult of tools/call.",
                False,
                None,
                None,
            )
        if status not in TASK_TERMINAL:
            if _age(state) > settings.mcp_task_max_duration:
                return (
                    f"Tool {tc.name} failed: its MCP task {task_id} was still {status} after "
                    f"{settings.mcp_task_max_duration:g}s; agentd gave up on it.",
                    False,
                    None,
                    None,
                )
            poll = state.get("pollInterval")
            delay = (
                max(0.05, poll / 1000)
                if isinstance(poll, int | float) and poll > 0
                else settings.mcp_task_poll_interval
            )
            await waiting.schedule_task_poll(
                ctx, task_id=task_id, state=state, delay=delay, first=first
            )
            return None
        if status == "cancelled":
            why = f": {state['statusMessage']}" if state.get("statusMessage") else ""
            return f"Tool {tc.name} failed: its MCP task was cancelled{why}.", False, None, None
        outcome = await client.task_result(task_id, session_id=_session(ctx), context=context)
        ctx.events.extend(mcp_events(outcome.exchanges, loop_id=tc.loop_id, tool_call_id=tc.id))
        if status == "failed" and not outcome.is_error:
            why = state.get("statusMessage") or outcome.text or "no reason given"
            return f"Tool {tc.name} failed: its MCP task failed: {why}", False, None, None
        return outcome.text, not outcome.is_error, outcome.structured, None


def _session(ctx: ToolContext) -> str:
    return (ctx.tool.session_id if ctx.tool else None) or ""


def _age(state: dict[str, Any]) -> float:
    since = state.get("agentd/since")
    try:
        started = datetime.fromisoformat(str(since))
    except ValueError:
        return 0.0
    return (datetime.now(UTC) - started).total_seconds()


def cap_result(text: str, limit: int) -> str:
    """`text` if it fits in `limit` UTF-8 bytes, else its head plus a marker that says so."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text
    marker = f"\n[agentd: tool result truncated: {len(data)} bytes, limit {limit}]"
    head = data[: max(0, limit - len(marker.encode()))].decode("utf-8", errors="ignore")
    return head + marker


def cap_structured(value: Any, limit: int) -> Any:
    """Structured content too large to store is dropped (the text result still says it all)."""
    if value is None:
        return None
    try:
        size = len(json.dumps(value, default=str).encode())
    except (TypeError, ValueError):
        return None
    return value if size <= limit else None

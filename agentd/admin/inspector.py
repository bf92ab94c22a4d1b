"""MCP Inspector (list an agent's servers' tools, run one, replay a recorded call) and the
inbound MCP sessions of mounted servers with their event history.

The Inspector talks to servers with the same `McpClient` and config the engine uses, built
from the agent (and, for a replay or `?loop=`, the loop's state). Every run is recorded as
an `admin.inspector_call` event, whatever its outcome; arguments that break the API's
cleaning rules (api/hygiene.py) are refused (422) before anything runs. A server that
cannot be reached is a message on the page.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from agentd.admin import render
from agentd.admin.loops import parse_uuid
from agentd.agent import Agent, LoopView, agent_mcp_configs
from agentd.api import hygiene
from agentd.api.state import AppState
from agentd.db.pool import connection, transaction
from agentd.event_names import EventName
from agentd.mcp.client import PREFIX_SEPARATOR, McpClient
from agentd.mcp.config import McpServerConfig
from agentd.mcp.port import CallContext
from agentd.mcp.records import McpTool, ToolOutcome
from agentd.store import events, loops, mcp, tool_calls
from agentd.store.models import Loop, NewEvent

router = APIRouter(prefix="/admin")

INBOUND_PAGE = 50
EVENTS_PAGE = 100


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.agentd
    return state


class InspectorError(Exception):
    """Shown on the page: the agent, server or tool cannot be used as asked."""


def _agent(state: AppState, name: str, loop: Loop | None) -> Agent:
    if name not in state.registry:
        raise InspectorError(f"unknown agent {name!r}")
    view = (
        LoopView(id=loop.id, subject=loop.subject, state=loop.state, step_count=loop.step_count)
        if loop is not None
        else LoopView()
    )
    try:
        return state.registry.instantiate(name, view)
    except Exception as exc:
        raise InspectorError(f"cannot build agent {name!r}: {exc}") from exc


async def _configs(agent: Agent) -> list[McpServerConfig]:
    try:
        return await agent_mcp_configs(agent)
    except Exception as exc:
        raise InspectorError(f"cannot read the agent's MCP servers: {exc}") from exc


def _pick(configs: list[McpServerConfig], server: str) -> McpServerConfig:
    for c in configs:
        if c.name == server:
            return c
    raise InspectorError(f"the agent has no MCP server {server!r}")


def _describe(config: McpServerConfig) -> str:
    if config.url:
        return config.url
    if config.command:
        return " ".join(config.command)
    if config.toolset is not None:
        return f"in-process toolset {getattr(config.toolset, 'name', '')}".strip()
    return "custom transport"


async def _session(
    config: McpServerConfig, context: CallContext
) -> tuple[McpClient, str, list[McpTool]]:
    client = McpClient(config)
    try:
        async with asyncio.timeout(config.timeout + 5):
            info = await client.initialize(context)
            tools, _ = await client.list_tools(info.session_id, context)
    except TimeoutError as exc:
        raise InspectorError(f"{config.name}: no answer within {config.timeout:g}s") from exc
    except Exception as exc:
        raise InspectorError(f"{config.name}: {exc}") from exc
    return client, info.session_id, tools


async def _loop(state: AppState, value: str | None) -> Loop | None:
    ident = parse_uuid(value) if value else None
    if ident is None:
        return None
    async with connection(state.pool) as conn:
        return await loops.get(conn, loop_id=ident)


def _skeleton(schema: dict[str, Any]) -> str:
    """Arguments to start from: every property with an empty value of its type."""
    empty = {"string": "", "integer": 0, "number": 0, "boolean": False, "array": [], "object": {}}
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return "{}"
    return json.dumps(
        {k: empty.get(str((v or {}).get("type"))) for k, v in props.items()}, indent=2
    )


async def _page(
    request: Request, extra: dict[str, Any] | None = None, *, status: int = 200
) -> Response:
    """The Inspector for ?agent=&server=&loop= (plus a run's result in `extra`)."""
    state = _state(request)
    extra = extra or {}
    params = request.query_params
    agent_name = extra.get("agent_name", params.get("agent") or "")
    server = extra.get("server", params.get("server") or "")
    loop = extra.get("lp") or await _loop(state, params.get("loop"))
    ctx: dict[str, Any] = {
        "nav": "mcp",
        "agents": state.registry.names(),
        "agent_name": agent_name,
        "server": server,
        "lp": loop,
        "servers": [],
        "tools": [],
        "error": None,
        "result": None,
        "ran": None,
        **extra,
    }
    if agent_name:
        try:
            agent = _agent(state, agent_name, loop)
            configs = await _configs(agent)
            ctx["servers"] = [{"name": c.name, "where": _describe(c)} for c in configs]
            if not server and len(configs) == 1:
                server = ctx["server"] = configs[0].name
            if server:
                context = CallContext(agent=agent, loop=agent.loop, principal=agent.mcp_principal)
                _, _, tools = await _session(_pick(configs, server), context)
                ctx["tools"] = [
                    {"tool": t, "schema": json.dumps(t.input_schema, indent=2),
                     "skeleton": _skeleton(t.input_schema)}
                    for t in tools
                ]  # fmt: skip
        except InspectorError as exc:
            ctx["error"] = ctx["error"] or str(exc)
    return render.render(request, "inspector.html", ctx, status=status)


@router.get("/mcp", include_in_schema=False)
async def inspector(request: Request) -> Response:
    return await _page(request)


async def _run(
    state: AppState,
    *,
    agent_name: str,
    server: str,
    tool: str,
    arguments: dict[str, Any],
    loop: Loop | None,
    tool_call_id: int | None = None,
) -> ToolOutcome:
    agent = _agent(state, agent_name, loop)
    config = _pick(await _configs(agent), server)
    context = CallContext(agent=agent, loop=agent.loop, principal=agent.mcp_principal)
    client, session_id, _ = await _session(config, context)
    # From here the tool may run: the audit event is written whatever happens next (an
    # error, a timeout, the browser going away), shielded so a cancellation cannot skip it.
    answer: dict[str, Any] = {"error": "cancelled before the tool answered"}
    try:
        async with asyncio.timeout(config.timeout + 5):
            outcome = await client.call_tool(
                tool, arguments, session_id=session_id, context=context
            )
        answer = {"text": outcome.text, "is_error": outcome.is_error}
    except TimeoutError as exc:
        answer = {"error": f"no answer within {config.timeout:g}s"}
        raise InspectorError(f"{tool}: no answer within {config.timeout:g}s") from exc
    except Exception as exc:
        answer = {"error": str(exc) or type(exc).__name__}
        raise InspectorError(f"{tool}: {exc}") from exc
    finally:
        audit = NewEvent(
            name=EventName.ADMIN_INSPECTOR_CALL,
            loop_id=loop.id if loop is not None else None,
            tool_call_id=tool_call_id,
            reason="replay" if tool_call_id is not None else "run",
            request_data={"server": server, "tool": tool, "arguments": arguments},
            response_data=answer,
            log=f"{agent_name}/{server}/{tool}",
        )
        await asyncio.shield(_audit(state, audit))
    return outcome


async def _audit(state: AppState, event: NewEvent) -> None:
    async with transaction(state.pool) as conn:
        await events.insert_many(conn, [event])


def _result(outcome: ToolOutcome) -> dict[str, Any]:
    return {
        "text": outcome.text,
        "is_error": outcome.is_error,
        "structured": json.dumps(outcome.structured, indent=2, ensure_ascii=False)
        if outcome.structured is not None
        else None,
        "exchanges": [e.as_event() for e in outcome.exchanges],
    }


@router.post("/mcp/run", include_in_schema=False)
async def run(request: Request) -> Response:
    state = _state(request)
    form = await request.form()
    field = {k: (v.strip() if isinstance(v, str) else "") for k, v in form.items()}
    agent_name, server, tool = (
        field.get("agent", ""),
        field.get("server", ""),
        field.get("tool", ""),
    )
    loop = await _loop(state, field.get("loop"))
    ran = {"tool": tool, "arguments": field.get("arguments", "") or "{}"}
    extra: dict[str, Any] = {"agent_name": agent_name, "server": server, "lp": loop, "ran": ran}
    status = 200
    try:
        arguments = hygiene.parse_json(ran["arguments"])
        if not isinstance(arguments, dict):
            raise InspectorError("arguments must be a JSON object")
        outcome = await _run(
            state, agent_name=agent_name, server=server, tool=tool, arguments=arguments, loop=loop
        )
        extra["result"] = _result(outcome)
    except hygiene.Unclean as exc:  # the API's rule: refused before anything runs
        extra["error"] = f"arguments {exc}"
        status = 422
    except ValueError as exc:
        extra["error"] = f"arguments are not valid JSON: {exc}"
    except InspectorError as exc:
        extra["error"] = str(exc)
    return await _page(request, extra, status=status)


async def _locate(state: AppState, loop: Loop, name: str) -> tuple[str, str]:
    """(server, remote tool name) of an advertised tool name in this loop."""
    async with connection(state.pool) as conn:
        rows = await mcp.list_tools(conn, loop_id=loop.id)
    for row in rows:
        if row.name == name:
            return row.mcp_name, row.remote_name
    configs = await _configs(_agent(state, loop.agent, loop))
    prefix, sep, rest = name.partition(PREFIX_SEPARATOR)
    for c in configs:
        if sep and c.prefix == prefix:
            return c.name, rest
    if len(configs) == 1:
        return configs[0].name, name
    raise InspectorError(f"cannot tell which MCP server offers {name!r}")


@router.post("/tool-calls/{tool_call_id}/replay", include_in_schema=False)
async def replay(request: Request, tool_call_id: str) -> Response:
    """Run a recorded tool call again: same tool, same arguments, a new invocation."""
    state = _state(request)
    call = None
    if tool_call_id.isdigit() and len(tool_call_id) < 19:
        async with connection(state.pool) as conn:
            call = await tool_calls.get(conn, tool_call_id=int(tool_call_id))
    if call is None:
        return render.redirect(
            request, "/admin/mcp", flash=("error", f"No tool call {tool_call_id!r}.")
        )
    loop = await _loop(state, str(call.loop_id))
    assert loop is not None
    arguments = call.arguments if isinstance(call.arguments, dict) else {}
    extra: dict[str, Any] = {
        "agent_name": loop.agent,
        "lp": loop,
        "ran": {"tool": call.name, "arguments": json.dumps(arguments, indent=2)},
        "replayed": call,
    }
    try:
        server, remote = await _locate(state, loop, call.name)
        extra["server"] = server
        extra["ran"]["tool"] = remote
        outcome = await _run(
            state,
            agent_name=loop.agent,
            server=server,
            tool=remote,
            arguments=arguments,
            loop=loop,
            tool_call_id=call.id,
        )
        extra["result"] = _result(outcome)
    except InspectorError as exc:
        extra["error"] = str(exc)
    return await _page(request, extra)


# --- inbound sessions ----------------------------------------------------------------------


@router.get("/mcp/inbound", include_in_schema=False)
async def inbound(request: Request) -> Response:
    state = _state(request)
    before = request.query_params.get("before", "")
    before_id = int(before) if before.isdigit() and len(before) < 19 else None
    async with connection(state.pool) as conn:
        rows = await mcp.list_inbound(conn, before_id=before_id, limit=INBOUND_PAGE + 1)
    more = len(rows) > INBOUND_PAGE
    rows = rows[:INBOUND_PAGE]
    return render.render(
        request,
        "inbound.html",
        {
            "nav": "inbound",
            "sessions": rows,
            "next_url": f"/admin/mcp/inbound?before={rows[-1]['id']}" if more else None,
            "paged": before_id is not None,
        },
    )


@router.get("/mcp/inbound/{inbound_id}", include_in_schema=False)
async def inbound_session(request: Request, inbound_id: str) -> Response:
    state = _state(request)
    if not inbound_id.isdigit() or len(inbound_id) > 18:
        return render.not_found(request, f"No inbound session {inbound_id!r}.")
    after = request.query_params.get("after", "0")
    after_id = int(after) if after.isdigit() and len(after) < 19 else 0
    async with connection(state.pool) as conn:
        row = await mcp.get_inbound(conn, inbound_id=int(inbound_id))
        rows = (
            await events.list_for_inbound(
                conn, inbound_session_id=row["id"], after_id=after_id, limit=EVENTS_PAGE + 1
            )
            if row
            else []
        )
    if row is None:
        return render.not_found(request, f"No inbound session {inbound_id}.")
    return render.render(
        request,
        "inbound_session.html",
        {
            "nav": "inbound",
            "s": row,
            "events": rows[:EVENTS_PAGE],
            "events_next": rows[EVENTS_PAGE - 1].id if len(rows) > EVENTS_PAGE else None,
        },
    )

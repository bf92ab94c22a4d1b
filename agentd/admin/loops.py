"""Loops: the filtered list, starting a loop, and a loop's page (transcript, events, MCP,
state, version) with its live fragment and stream. What a person does to a loop from that
page is in `loop_actions`."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from agentd.admin import forms, live, render
from agentd.api import routes_loops
from agentd.api.state import AppState
from agentd.db.pool import Connection, connection
from agentd.engine import loop_limits, upgrades
from agentd.engine.lifecycle import DEFAULT_RESUME_FROM
from agentd.errors import AgentdError, DatabaseError
from agentd.event_names import EventName
from agentd.states import (
    ACTIVE,
    ApprovalStatus,
    LoopStatus,
    MessageStatus,
    TransitionReason,
)
from agentd.store import (
    agent_versions,
    events,
    jobs,
    loop_reports,
    loops,
    mcp,
    messages,
    tool_calls,
)
from agentd.store.models import Event, Loop, Message, ToolCall

router = APIRouter(prefix="/admin")

PAGE_SIZE = 50
EVENTS_PAGE = 100
STATUSES = [str(s) for s in LoopStatus]
TABS = ("transcript", "events", "mcp", "state", "version")
#: Pauses by the loop's own limits: resuming offers to raise them.
LIMIT_REASONS = (
    TransitionReason.MAX_STEPS,
    TransitionReason.TOKEN_BUDGET,
    TransitionReason.COST_BUDGET,
)
_HEX = re.compile(r"^[0-9a-f]{1,32}$")


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.agentd
    return state


def parse_uuid(value: str) -> UUID | None:
    try:
        return UUID(value.strip())
    except (ValueError, AttributeError):
        return None


def id_range(text: str) -> tuple[UUID, UUID] | None:
    """A hex prefix of a loop id as the (lowest, highest) ids that start with it."""
    digits = text.strip().lower().replace("-", "")
    if not _HEX.match(digits):
        return None
    return UUID(digits.ljust(32, "0")), UUID(digits.ljust(32, "f"))


def like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def encode_cursor(loop: Loop) -> str:
    return f"{loop.created_at.isoformat()}~{loop.id}"


def decode_cursor(value: str) -> tuple[datetime, UUID] | None:
    at, _, ident = value.partition("~")
    try:
        parsed = datetime.fromisoformat(at)
    except ValueError:
        return None
    loop_id = parse_uuid(ident)
    if loop_id is None or parsed.tzinfo is None:
        return None
    return parsed, loop_id


# --- list and start ------------------------------------------------------------------------


@router.get("/loops", include_in_schema=False)
async def list_loops(request: Request) -> Response:
    state = _state(request)
    params = request.query_params
    status = params.get("status") or None
    agent = params.get("agent") or None
    q = (params.get("q") or "").strip()[:200]
    problems = []
    if status is not None and status not in STATUSES:
        problems.append(f"unknown status {status!r}")
        status = None
    cursor = None
    if params.get("cursor"):
        cursor = decode_cursor(params["cursor"])
        if cursor is None:
            problems.append("that page link is broken; showing the first page")
    exact = parse_uuid(q) if q else None
    async with connection(state.pool) as conn:
        if exact is not None and (await loops.get(conn, loop_id=exact)) is not None:
            return render.redirect(request, f"/admin/loops/{exact}")
        if q:
            rows = await loop_reports.search(
                conn,
                status=status,
                agent=agent,
                pattern=like_pattern(q),
                id_range=id_range(q),
                cursor=cursor,
                limit=PAGE_SIZE + 1,
            )
        else:
            rows = await loop_reports.list_(
                conn, status=status, agent=agent, cursor=cursor, limit=PAGE_SIZE + 1
            )
        counts = await loop_reports.count_by_status_capped(conn, statuses=STATUSES, cap=10_000)
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    keep = {k: v for k, v in (("status", status), ("agent", agent), ("q", q)) if v}
    next_url = (
        "/admin/loops?" + urlencode({**keep, "cursor": encode_cursor(rows[-1])}) if more else None
    )
    return render.render(
        request,
        "loops.html",
        {
            "nav": "loops",
            "loops": rows,
            "status": status,
            "agent": agent,
            "q": q,
            "agents": state.registry.names(),
            "statuses": STATUSES,
            "counts": counts,
            "next_url": next_url,
            "first_url": "/admin/loops?" + urlencode(keep) if cursor else None,
            "problems": problems,
            "has_filter": bool(keep),
        },
    )


@router.post("/loops", include_in_schema=False)
async def start_loop(request: Request) -> Response:
    state = _state(request)
    form = await request.form()
    agent, message = forms.text_field(form, "agent"), forms.text_field(form, "message")
    raw_state = forms.text_field(form, "state")
    try:
        loop_state = forms.json_field("state", raw_state) if raw_state else {}
    except ValueError as exc:  # bad syntax: a message; a broken rule is FormInvalid (422)
        return render.redirect(
            request, "/admin/loops", flash=("error", f"state is not valid JSON: {exc}")
        )
    if not isinstance(loop_state, dict):
        return render.redirect(request, "/admin/loops", flash=("error", "state must be an object"))
    try:
        loop = await state.lifecycle.start(
            agent=agent,
            message=message,
            subject=forms.text_field(form, "subject") or None,
            title=forms.text_field(form, "title") or None,
            state=loop_state,
            observe=bool(form.get("observe")),
        )
    except DatabaseError:
        raise  # an outage or a bug, not a mistake in the form: the API's handlers answer
    except AgentdError as exc:
        return render.redirect(request, "/admin/loops", flash=("error", exc.message))
    return render.redirect(
        request, f"/admin/loops/{loop.id}", flash=("ok", f"Started a {agent} loop.")
    )


# --- one loop ------------------------------------------------------------------------------


def transcript(
    rows: list[Message], calls: list[ToolCall]
) -> tuple[list[dict[str, Any]], list[ToolCall]]:
    """Messages to show, each with its tool calls; tool results are shown on their call."""
    by_message: dict[int, list[ToolCall]] = {}
    for c in calls:
        by_message.setdefault(c.message_id, []).append(c)
    known = {c.id for c in calls}
    out = []
    prev: int | None = None  # the message before, in the prompt: "regenerate this reply"
    for m in rows:
        if m.hidden and m.status != MessageStatus.PROCESSING:
            continue  # a failed shell: its turn was retried
        live = not m.hidden and m.superseded_at is None
        if not (m.role == "tool" and m.tool_call_id in known):
            out.append({"m": m, "calls": by_message.get(m.id, []), "prev": prev, "live": live})
        if live:
            prev = m.id
    pending = [c for c in calls if c.approval_status == ApprovalStatus.PENDING]
    return out, pending


#: What the reaper writes when it takes work back from a dead or stalled worker.
RECLAIMS = (EventName.TURN_RECLAIMED, EventName.TOOL_CALL_RECLAIMED)


async def _live_context(state: AppState, loop: Loop) -> dict[str, Any]:
    # One snapshot for the loop and its transcript: read apart, a decision's commit could
    # land between them (a pending approval shown beside a loop still `running`).
    async with (
        connection(state.pool) as conn,
        conn.transaction(isolation="repeatable_read", readonly=True),
    ):
        loop = await loops.get(conn, loop_id=loop.id) or loop
        rows = await messages.list_(conn, loop_id=loop.id, include_hidden=True)
        calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
        queued = await jobs.list_for_loop(conn, loop_id=loop.id)
        reclaims = await events.list_named(conn, loop_id=loop.id, names=RECLAIMS)
    items, pending = transcript(rows, calls)
    reclaimed: dict[int, list[Event]] = {}
    for e in reclaims:
        if e.tool_call_id is not None:
            reclaimed.setdefault(e.tool_call_id, []).append(e)
    agent_cls = state.registry.get(loop.agent) if loop.agent in state.registry else None
    async with connection(state.pool) as conn:
        waiting = await routes_loops.waiting_for_version(state, conn, loop)
    return {
        "lp": loop,
        "waiting_for_version": waiting,
        "budget": loop_limits.token_budget(agent_cls, loop),
        "cost_limit": loop_limits.cost_budget(agent_cls, loop),
        "cost_budget": loop_limits.cost_budget(agent_cls, loop),
        "step_limit": loop_limits.max_steps(agent_cls, loop),
        # Paused by its own limits: resume offers raising them (a plain resume re-pauses).
        "limit_paused": loop.status == LoopStatus.PAUSED and loop.status_reason in LIMIT_REASONS,
        "items": items,
        "pending": pending,
        "jobs": queued,
        "reclaims": reclaims,
        "reclaimed": reclaimed,
        "active": loop.status in ACTIVE,
        "resumable": loop.status in DEFAULT_RESUME_FROM,
        "can_continue": loop.status not in ACTIVE,
    }


async def _get_loop(state: AppState, loop_id: UUID) -> Loop | None:
    async with connection(state.pool) as conn:
        return await loops.get(conn, loop_id=loop_id)


@router.get("/loops/{loop_id}", include_in_schema=False)
async def loop_page(request: Request, loop_id: str) -> Response:
    state = _state(request)
    ident = parse_uuid(loop_id)
    loop = await _get_loop(state, ident) if ident else None
    if loop is None:
        return render.not_found(request, f"No loop {loop_id!r}.")
    tab = request.query_params.get("tab", "transcript")
    tab = tab if tab in TABS else "transcript"
    ctx: dict[str, Any] = {"nav": "loops", "tab": tab, **await _live_context(state, loop)}
    async with connection(state.pool) as conn:
        if tab == "events":
            after = request.query_params.get("after", "0")
            after_id = int(after) if after.isdigit() and len(after) < 19 else 0
            rows = await events.list_(
                conn, loop_id=loop.id, after_id=after_id, limit=EVENTS_PAGE + 1
            )
            ctx["events"] = rows[:EVENTS_PAGE]
            ctx["events_next"] = rows[EVENTS_PAGE - 1].id if len(rows) > EVENTS_PAGE else None
            ctx["events_after"] = after_id
        elif tab == "mcp":
            ctx["sessions"] = await mcp.list_sessions(conn, loop_id=loop.id)
            ctx["tools"] = await mcp.list_tools(conn, loop_id=loop.id)
        elif tab == "version":
            ctx.update(await _version_context(state, conn, loop))
    return render.render(request, "loop.html", ctx)


async def _version_context(state: AppState, conn: Connection, loop: Loop) -> dict[str, Any]:
    recorded = await agent_versions.list_(conn, stale_seconds=routes_loops.stale_seconds(state))
    mine = [v for v in recorded if v["agent"] == loop.agent]
    current = None
    if loop.agent_version is not None:
        current = await agent_versions.get(conn, version_id=loop.agent_version)
    definition = current["definition"] if current else None
    return {"versions": mine, "definition": definition, "plan": None}


@router.post("/loops/{loop_id}/upgrade", include_in_schema=False)
async def upgrade_loop(request: Request, loop_id: str) -> Response:
    """The Version tab's form: "Preview" shows the dry run's diff on the page; "Upgrade"
    records the move (applied at the loop's next turn boundary)."""
    state = _state(request)
    ident = parse_uuid(loop_id)
    if ident is None:
        return render.redirect(request, "/admin/loops", flash=("error", f"No loop {loop_id!r}."))
    back = f"/admin/loops/{ident}?tab=version"
    form = await request.form()
    target = forms.text_field(form, "to_version") or None
    dry = forms.text_field(form, "mode") != "upgrade"
    try:
        plan = await upgrades.upgrade_loop(
            state.pool, ident, to_version=target, dry_run=dry, by="admin"
        )
    except DatabaseError:
        raise  # an outage or a bug, not a mistake in the form: the API's handlers answer
    except AgentdError as exc:
        return render.redirect(request, back, flash=("error", exc.message))
    if not dry:
        done = f"Upgrade to {plan['to_version']} recorded: applied at the next turn boundary."
        if plan["pending_upgrade"] is None:
            done = f"The loop already runs {plan['to_version']}: nothing pending."
        return render.redirect(request, back, flash=("ok", done))
    loop = await _get_loop(state, ident)
    if loop is None:
        return render.not_found(request, f"No loop {loop_id!r}.")
    ctx: dict[str, Any] = {"nav": "loops", "tab": "version", **await _live_context(state, loop)}
    async with connection(state.pool) as conn:
        ctx.update(await _version_context(state, conn, loop))
    ctx["plan"] = plan
    return render.render(request, "loop.html", ctx)


@router.get("/loops/{loop_id}/live", include_in_schema=False)
async def loop_fragment(request: Request, loop_id: str) -> Response:
    """The part of the loop page that changes: header, actions and transcript."""
    state = _state(request)
    ident = parse_uuid(loop_id)
    loop = await _get_loop(state, ident) if ident else None
    if loop is None:
        return render.not_found(request, f"No loop {loop_id!r}.")
    tab = request.query_params.get("tab", "transcript")
    ctx = {"tab": tab if tab in TABS else "transcript", **await _live_context(state, loop)}
    return render.render(request, "_live.html", ctx)


@router.get("/loops/{loop_id}/stream", include_in_schema=False)
async def loop_stream(request: Request, loop_id: str) -> Response:
    """SSE for the loop page; opening it turns `observed` on for a loop that is not at
    rest, as the API's stream does. Viewing a finished or observed loop writes nothing."""
    state = _state(request)
    ident = parse_uuid(loop_id)
    loop = await _get_loop(state, ident) if ident is not None else None
    if ident is None or loop is None:
        return render.not_found(request, f"No loop {loop_id!r}.")
    if not loop.observed and loop.status in ACTIVE:
        await state.lifecycle.observe(ident, True)
    hub: live.Hub = request.app.state.admin_hub

    async def partial() -> tuple[int, str] | None:
        async with connection(state.pool) as conn:
            shell = await messages.streaming_shell(conn, loop_id=ident)
        return (shell.id, shell.content) if shell is not None and shell.content else None

    return StreamingResponse(
        live.frames(hub, ident, partial),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )

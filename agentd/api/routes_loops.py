"""/v1/loops: start, list, show, children, transcript, events, messages sent to a loop,
pending approvals. What a person does to a loop is routes_loop_actions.py."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from fastapi import APIRouter, Header, Query, Request, Response

from agentd.api import auth, idempotency, pagination, problems
from agentd.api.schemas import (
    AppendMessage,
    CleanStr,
    EventOut,
    LoopOut,
    MessageOut,
    Page,
    SentMessageOut,
    SentOut,
    StartLoop,
    ToolCallOut,
    render_messages,
)
from agentd.api.state import AppState
from agentd.db.pool import Connection, connection, transaction
from agentd.errors import LoopNotFound
from agentd.states import JobQueue, LoopInputStatus, LoopStatus
from agentd.store import (
    agent_versions,
    events,
    loop_inputs,
    loop_reports,
    loops,
    messages,
    tool_calls,
)
from agentd.store.models import Loop

router = APIRouter(prefix="/loops", tags=["loops"])

BIGINT = 2**63 - 1
_READ = problems.responses(401, 404, 422)
_CHANGE = problems.responses(400, 401, 403, 404, 409, 413, 422)


def app_state(request: Request) -> AppState:
    return request.app.state.agentd


async def _get(state: AppState, loop_id: UUID) -> Loop:
    async with connection(state.pool) as conn:
        loop = await loops.get(conn, loop_id=loop_id)
    if loop is None:
        raise LoopNotFound(f"no loop {loop_id}")
    return loop


@router.post(
    "",
    status_code=201,
    summary="Start a loop",
    responses=problems.responses(400, 401, 403, 404, 413, 422),
)
async def start_loop(
    body: StartLoop,
    request: Request,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias=idempotency.HEADER,
            pattern=idempotency.KEY_PATTERN,
            description="Retrying with the same key and body answers with the loop the "
            "first request started (`Idempotent-Replayed: true`) instead of starting "
            "another; another body with the key is a 422. Kept for "
            "AGENTD_IDEMPOTENCY_KEY_RETENTION (24 h by default).",
        ),
    ] = None,
) -> LoopOut:
    """Create a loop for `agent` with a first user message; a worker picks it up."""
    state = app_state(request)
    loop_state = body.initial_state()

    async def start(conn: Connection) -> Loop:
        return await state.lifecycle.start_in(
            conn,
            agent=body.agent,
            message=body.message,
            subject=body.subject,
            state=loop_state,
            observe=body.observe,
            concurrency_key=body.concurrency_key,
            concurrency_limit=body.concurrency_limit,
        )

    if idempotency_key is None:
        async with transaction(state.pool) as conn:
            loop = await start(conn)
    else:
        loop, replayed = await idempotency.start_once(
            state, key=idempotency_key, body=body.model_dump(mode="json"), start=start
        )
        if replayed:
            response.headers["Idempotent-Replayed"] = "true"
    response.headers["Location"] = f"/v1/loops/{loop.id}"
    return LoopOut.of(loop)


@router.get("", summary="List loops, newest first", responses=problems.responses(400, 401, 422))
async def list_loops(
    request: Request,
    status: Annotated[LoopStatus | None, Query(description="Only loops in this status.")] = None,
    agent: Annotated[
        CleanStr | None, Query(max_length=200, description="Only this agent's loops.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[
        CleanStr | None, Query(max_length=500, description="`next_cursor` of the previous page.")
    ] = None,
    include: Annotated[
        Literal["state"] | None,
        Query(description="`state`: give each loop its `state` (null in list items without)."),
    ] = None,
    parent_id: Annotated[
        UUID | None, Query(description="Only the child loops of this loop.")
    ] = None,
) -> Page[LoopOut]:
    """A page of loops. Their `state` is left out (null) unless `include=state`: a list stays
    light however large states are; GET /v1/loops/{id} (or /state) has it."""
    state = app_state(request)
    after = pagination.decode(cursor) if cursor else None
    async with connection(state.pool) as conn:
        rows = await loop_reports.list_(
            conn,
            status=str(status) if status else None,
            agent=agent,
            cursor=after,
            limit=limit + 1,  # one extra row says whether another page exists
            parent_id=parent_id,
        )
    page = rows[:limit]
    more = len(rows) > limit
    nxt = pagination.encode(page[-1].created_at, page[-1].id) if more else None
    with_state = include == "state"
    items = [LoopOut.of(r, with_state=with_state) for r in page]
    return Page[LoopOut](items=items, next_cursor=nxt)


def stale_seconds(state: AppState) -> float:
    """A worker whose heartbeat is older is not live (the reaper's limit)."""
    s = state.settings
    return max(s.heartbeat_interval * 6, s.lease_margin)


async def waiting_for_version(state: AppState, conn: Connection, loop: Loop) -> str | None:
    """The version a queued loop (or one between its tool calls) needs next when no live
    worker can run it; None: not waiting on one."""
    if loop.frozen or loop.status not in (LoopStatus.QUEUED, LoopStatus.RUNNING):
        return None
    if loop.status == LoopStatus.RUNNING and loop.lease_expires_at is not None:
        return None  # a turn in flight: a worker that has the version holds it
    queued = loop.status == LoopStatus.QUEUED
    need = (loop.upgrade_to or loop.agent_version) if queued else loop.agent_version
    live = await agent_versions.live(
        conn, queue=JobQueue.LLM if queued else JobQueue.TOOL, stale_seconds=stale_seconds(state)
    )
    if need is not None and need in live:
        return None
    return need or f"{loop.agent} (no version recorded)"


@router.get("/{loop_id}", summary="Show a loop", responses=_READ)
async def show_loop(loop_id: UUID, request: Request) -> LoopOut:
    """`waiting_for_version` names the agent version the loop waits for, if no live worker
    can run it."""
    state = app_state(request)
    async with connection(state.pool) as conn:
        loop = await loops.get(conn, loop_id=loop_id)
        if loop is None:
            raise LoopNotFound(f"no loop {loop_id}")
        out = LoopOut.of(loop)
        out.waiting_for_version = await waiting_for_version(state, conn, loop)
        if loop.child_count:
            kids = await loops.list_children(conn, parent_id=loop.id)
            out.children = [k.id for k in kids]
        else:
            out.children = []
    return out


@router.get("/{loop_id}/children", summary="The loop's child loops", responses=_READ)
async def list_children(loop_id: UUID, request: Request) -> Page[LoopOut]:
    """The child loops this loop's agent tools started, oldest first (docs/agents.md,
    "Child loops"); each has `parent_id` and `parent_tool_call_id`."""
    async with connection(app_state(request).pool) as conn:
        if await loops.get(conn, loop_id=loop_id) is None:
            raise LoopNotFound(f"no loop {loop_id}")
        kids = await loops.list_children(conn, parent_id=loop_id)
    return Page[LoopOut](items=[LoopOut.of(k, with_state=False) for k in kids], next_cursor=None)


@router.get("/{loop_id}/messages", summary="The transcript", responses=_READ)
async def transcript(
    loop_id: UUID,
    request: Request,
    include_hidden: Annotated[
        bool, Query(description="Also streaming partials and failed shells.")
    ] = False,
) -> Page[MessageOut]:
    """Messages in order; assistant messages carry their tool calls and results."""
    state = app_state(request)
    async with connection(state.pool) as conn:
        if await loops.get(conn, loop_id=loop_id) is None:
            raise LoopNotFound(f"no loop {loop_id}")
        msgs = await messages.list_(conn, loop_id=loop_id, include_hidden=include_hidden)
        calls = await tool_calls.list_for_loop(conn, loop_id=loop_id)
    return Page[MessageOut](items=render_messages(msgs, calls), next_cursor=None)


@router.get("/{loop_id}/events", summary="Events and wire logs", responses=_READ)
async def list_events(
    loop_id: UUID,
    request: Request,
    after: Annotated[int, Query(ge=0, le=BIGINT, description="Event id to start after.")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Page[EventOut]:
    """Oldest first; pass `next_cursor` back as `after`. Secrets are redacted at write."""
    state = app_state(request)
    async with connection(state.pool) as conn:
        if await loops.get(conn, loop_id=loop_id) is None:
            raise LoopNotFound(f"no loop {loop_id}")
        rows = await events.list_(conn, loop_id=loop_id, after_id=after, limit=limit)
    nxt = str(rows[-1].id) if len(rows) == limit else None
    return Page[EventOut](items=[EventOut.of(e) for e in rows], next_cursor=nxt)


@router.post(
    "/{loop_id}/messages",
    summary="Send a user message (continue, steer or interrupt)",
    responses={**_CHANGE, 202: {"description": "Accepted: pending until a turn boundary."}},
)
async def append_message(
    loop_id: UUID,
    body: AppendMessage,
    request: Request,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias=idempotency.HEADER,
            pattern=idempotency.KEY_PATTERN,
            description="Retrying with the same key (per loop) answers with the message the "
            "first request sent (`Idempotent-Replayed: true`) instead of sending another; "
            "another body with the key is a 422.",
        ),
    ] = None,
) -> SentOut:
    """A loop at rest (completed, failed, paused, stopped) takes the message now and
    continues (200). A running, waiting or queued loop takes it by `mode` (docs/api.md,
    Steering): `queue` (default) and `inject` answer 202 with the message pending;
    `interrupt` cancels the turn in flight and answers 200 with the message applied."""
    state = app_state(request)
    sent = await state.lifecycle.send(
        loop_id,
        body.content,
        mode=body.mode,
        idempotency_key=idempotency_key,
        request_hash=(
            idempotency.request_hash(body.model_dump(mode="json")) if idempotency_key else None
        ),
        sent_by=auth.caller(request),
    )
    if sent.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    if sent.input.status == LoopInputStatus.PENDING:
        response.status_code = 202
    return SentOut.of_send(sent.loop, sent.input)


@router.get("/{loop_id}/sent-messages", summary="Messages sent to the loop", responses=_READ)
async def list_sent_messages(
    loop_id: UUID,
    request: Request,
    pending: Annotated[bool, Query(description="Only those not applied yet.")] = False,
) -> Page[SentMessageOut]:
    """Every message sent with POST /messages, oldest first: pending ones, and applied ones
    with the transcript message each became."""
    state = app_state(request)
    async with connection(state.pool) as conn:
        if await loops.get(conn, loop_id=loop_id) is None:
            raise LoopNotFound(f"no loop {loop_id}")
        rows = await loop_inputs.list_(conn, loop_id=loop_id, pending_only=pending)
    return Page[SentMessageOut](items=[SentMessageOut.of(i) for i in rows], next_cursor=None)


@router.get("/{loop_id}/approvals", summary="Tool calls waiting for a decision", responses=_READ)
async def approvals(loop_id: UUID, request: Request) -> Page[ToolCallOut]:
    state = app_state(request)
    async with connection(state.pool) as conn:
        if await loops.get(conn, loop_id=loop_id) is None:
            raise LoopNotFound(f"no loop {loop_id}")
        rows = await tool_calls.list_pending_approval(conn, loop_id=loop_id)
    return Page[ToolCallOut](items=[ToolCallOut.of(c) for c in rows], next_cursor=None)

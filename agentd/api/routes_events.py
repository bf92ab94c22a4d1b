"""GET /v1/events: every loop's events, oldest first, as JSON pages or Server-Sent Events.

Both are keyset on the event id (`after`, `next_cursor`, SSE `id:` / `Last-Event-ID`), so
a client resumes exactly where it stopped. Events are the per-loop events' rows and shape
(secrets redacted before they were stored). An event is served once it is a second old:
ids are assigned at insert but visible at commit, and holding the youngest back is what
lets a cursor never step over an id that commits late (store/sql/events.sql).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from agentd.api import problems
from agentd.api.events_tail import FeedTail
from agentd.api.problems import ApiProblem
from agentd.api.routes_loops import BIGINT, app_state
from agentd.api.schemas import CleanStr, EventOut, Page
from agentd.api.stream_hub import HeldStream, StreamHub, StreamSlots
from agentd.db.pool import connection
from agentd.store import events

router = APIRouter(tags=["events"])

SETTLE_SECONDS = 1.0
POLL_SECONDS = 1.0
KEEPALIVE_SECONDS = 15.0
SSE_BATCH = 500


def _types(value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [t.strip() for t in value.split(",") if t.strip()]
    return names or None


def _last_event_id(value: str | None) -> int | None:
    if value is None or not value.strip():
        return None
    text = value.strip()
    if not text.isdigit() or len(text) > 18:
        raise ApiProblem(
            400, "Last-Event-ID must be an event id", problem_type="invalid-last-event-id"
        )
    return int(text)


@router.get(
    "/events",
    summary="The fleet's events (JSON pages, or SSE with Accept: text/event-stream)",
    response_model=Page[EventOut],
    responses={
        200: {
            "description": "A page of events, or an SSE stream of them (`id:` = event id).",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **problems.responses(400, 401, 422, 429),
    },
)
async def list_events(
    request: Request,
    after: Annotated[
        int | None,
        Query(
            ge=0,
            le=BIGINT,
            description="Event id to start after (a page's `next_cursor`). JSON default: 0; "
            "SSE default: the newest event (tail from now).",
        ),
    ] = None,
    loop: Annotated[UUID | None, Query(description="Only this loop's events.")] = None,
    agent: Annotated[
        CleanStr | None, Query(max_length=200, description="Only events of this agent's loops.")
    ] = None,
    types: Annotated[
        CleanStr | None,
        Query(max_length=2000, description="Comma-separated event names (loop.failed,...)."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    accept: Annotated[str | None, Header(include_in_schema=False)] = None,
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", max_length=100, include_in_schema=False)
    ] = None,
) -> Page[EventOut] | StreamingResponse:
    """Oldest first. JSON: pass `next_cursor` back as `after`; it is null once you are
    caught up (poll again later from your last event's id). SSE: one `event: <name>` per
    event, `data:` the JSON event, `id:` its id; reconnect with `Last-Event-ID`."""
    names = _types(types)
    pool = app_state(request).pool
    if accept and "text/event-stream" in accept.lower():
        start = _last_event_id(last_event_id)
        slots: StreamSlots = request.app.state.stream_slots
        release = slots.take(StreamSlots.key(request.headers.get("authorization")))
        try:
            if start is None:
                start = after
            if start is None:
                async with connection(pool) as conn:
                    start = await events.max_id(conn)
        except BaseException:
            release()
            raise
        tail: FeedTail = request.app.state.events_tail
        tail.join()
        return HeldStream(
            _sse(request, start, loop, agent, names),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            on_close=[release, tail.leave],
        )
    async with connection(pool) as conn:
        page = await events.read_feed(
            conn,
            after_id=after or 0,
            loop_id=loop,
            agent=agent,
            names=names,
            limit=limit,
            settle=SETTLE_SECONDS,
        )
    return Page[EventOut](
        items=[EventOut.of(e) for e in page.events],
        next_cursor=str(page.position) if page.more else None,
    )


async def _sse(
    request: Request, after: int, loop: UUID | None, agent: str | None, names: list[str] | None
) -> AsyncIterator[str]:
    pool = app_state(request).pool
    tail: FeedTail = request.app.state.events_tail
    hub: StreamHub = request.app.state.stream_hub
    cursor = after
    yield ": agentd events\n\n"
    while True:
        async with hub.read_slots, connection(pool) as conn:  # one read, never while waiting
            page = await events.read_feed(
                conn,
                after_id=cursor,
                loop_id=loop,
                agent=agent,
                names=names,
                limit=SSE_BATCH,
                settle=SETTLE_SECONDS,
            )
        for e in page.events:
            data = EventOut.of(e).model_dump_json()
            yield f"id: {e.id}\nevent: {e.name}\ndata: {data}\n\n"
        # Past ids that matched nothing too: a rare filter does not rescan them each poll.
        cursor = page.position
        if page.more:
            continue
        if await request.is_disconnected():
            return
        # Caught up: wait (without a query) until the feed's horizon passes the cursor.
        if not await tail.wait_past(cursor, KEEPALIVE_SECONDS):
            yield ": keep-alive\n\n"

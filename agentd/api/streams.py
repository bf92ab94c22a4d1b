"""GET /v1/loops/{id}/stream: Server-Sent Events fed by one shared LISTEN per process.

The engine (in this process or any other) publishes JSON on the `agentd_stream` channel at
commit: `delta` (streamed text), `message` (a committed message id), `status`, `approval`,
`sent` (a message sent to the loop: its input id and mode);
`api/stream_hub.py` fans it out, so an SSE client costs no database connection while it
waits. `protocol=ag-ui` hands the same feed to `api/agui.py`.

Event ids (for `Last-Event-ID` resumption):

- `m<N>`: a `message` event; N is the message id.
- `d<N>.<k>`, `s<N>.<k>`, `a<N>.<k>`, `i<N>.<k>`: delta, status, approval and sent
  events; N is the highest message id sent on the stream so far, k a counter; while a
  message is being streamed, `.<id>.<chars>` follows: the characters of it this stream
  has shown.

On reconnect with `Last-Event-ID`, every visible message with id > N is sent, and so are
the tool results after the newest assistant message with id <= N: the tool calls of one
turn run in parallel and their results can commit out of id order, so one of them may
arrive twice (its `id` tells); nothing committed is missed.
A stream opened mid-turn first gets the turn's saved text; a resumed one gets the part
past `<chars>`; the deltas after it start where it ends (offsets, api/stream_hub.DeltaCursor).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response, StreamingResponse

from agentd.api import agui, problems
from agentd.api.problems import ApiProblem
from agentd.api.routes_loops import app_state
from agentd.api.schemas import render_messages
from agentd.api.stream_hub import (
    END,
    KEEPALIVE_SECONDS,
    RESYNC,
    DeltaCursor,
    HeldStream,
    StreamHub,
    StreamSlots,
    Subscription,
    newest_assistant,
    observed_stream,
    streaming_partial,
)
from agentd.db.pool import connection
from agentd.errors import LoopNotFound
from agentd.store import loops
from agentd.store.models import Loop

_EVENT_ID = re.compile(r"^[mdsai](\d{1,18})(?:\.\d{1,18}(?:\.(\d{1,18})\.(\d{1,18}))?)?$")


@dataclass(frozen=True)
class Resume:
    high: int  # N: every message up to it was sent
    streamed: tuple[int, int] | None  # (message id, characters shown) of a turn mid-stream


router = APIRouter(tags=["streams"])


def _frame(event: str, event_id: str, data: dict[str, Any]) -> str:
    return f"id: {event_id}\nevent: {event}\ndata: {json.dumps(data, default=str)}\n\n"


class LoopStream:
    """The frames of one SSE connection."""

    def __init__(
        self, request: Request, sub: Subscription, loop: Loop, resume: Resume | None
    ) -> None:
        self.state = app_state(request)
        self.hub: StreamHub = request.app.state.stream_hub
        self.sub = sub
        self.loop = loop
        self.resume_from = resume.high if resume is not None else None
        # Every visible message with id <= floor has been sent (or predates the stream);
        # above it, `sent` says which were. Tool results of one turn can commit out of id
        # order, but never before their assistant message, hence the floor's definition.
        self.floor = 0
        self.sent: set[int] = set()
        self.high = 0  # highest message id sent, the N of non-message event ids
        self.counter = 0
        self.status = loop.status
        self.deltas = DeltaCursor()
        # The message being streamed and how much of it this connection showed: carried in
        # every non-message id, so a resumed stream goes on from there, not from offset 0.
        self.open: tuple[int, int] | None = None
        if resume is not None and resume.streamed is not None:
            self.open = resume.streamed
            self.deltas.mark(*resume.streamed)

    def _next_id(self, kind: str) -> str:
        self.counter += 1
        if self.open is not None and self.open[0] > self.floor and self.open[0] not in self.sent:
            return f"{kind}{self.high}.{self.counter}.{self.open[0]}.{self.open[1]}"
        return f"{kind}{self.high}.{self.counter}"

    async def _catch_up(self) -> list[str]:
        pool, loop_id = self.state.pool, self.loop.id
        rows = await self.hub.messages_after(pool, loop_id, self.floor)
        fresh = [m for m in rows if m.id not in self.sent]
        calls = await self.hub.tool_calls(pool, loop_id) if fresh else []
        frames = []
        for out in render_messages(fresh, calls):
            self.sent.add(out.id)
            self.high = max(self.high, out.id)
            frames.append(_frame("message", f"m{out.id}", out.model_dump(mode="json")))
        newest = newest_assistant(rows)
        if newest > self.floor:
            self.floor = newest
            self.sent = {i for i in self.sent if i > newest}
        return frames

    def _delta_frame(self, item: dict[str, Any]) -> str | None:
        mid = item.get("message_id")
        if isinstance(mid, int) and (mid <= self.floor or mid in self.sent):
            return None  # a late delta of a message already committed and sent
        delta = self.deltas.take(item)
        if delta is None:
            return None
        data: dict[str, Any] = {
            "message_id": delta.message_id,
            "offset": delta.offset,
            "delta": delta.text,
        }
        if delta.gap:
            data["truncated"] = True  # text before `offset` was cut; the message carries it
        self.open = (delta.message_id, self.deltas.shown(delta.message_id))
        return _frame("delta", self._next_id("d"), data)

    def _status_frame(self, status: str, **extra: object) -> str:
        self.status = status
        data = {"status": status, **{k: v for k, v in extra.items() if v is not None}}
        if "reason" in data:  # the REST name; `reason` stays for existing clients
            data["status_reason"] = data["reason"]
        return _frame("status", self._next_id("s"), data)

    async def frames(self) -> AsyncIterator[str]:
        try:
            async for frame in self._frames():
                yield frame
        finally:
            await self.hub.unsubscribe(self.sub)

    async def _frames(self) -> AsyncIterator[str]:
        rows = await self.hub.transcript(self.state.pool, self.loop.id)
        shell = streaming_partial(rows)
        rows = [m for m in rows if not m.hidden]
        if self.resume_from is None:
            self.floor = newest_assistant(rows)
            self.sent = {m.id for m in rows if m.id > self.floor}
            self.high = max((m.id for m in rows), default=0)
        else:
            self.floor = newest_assistant(rows, at_most=self.resume_from)
            # Only tool results commit out of id order: anything else up to N was sent.
            self.sent = {
                m.id for m in rows if self.floor < m.id <= self.resume_from and m.role != "tool"
            }
            self.high = self.resume_from
            for frame in await self._catch_up():
                yield frame
        loop = self.loop
        yield self._status_frame(loop.status, reason=loop.status_reason, error=loop.error_message)
        if loop.status in END:
            return
        if shell is not None and shell.content:
            # Joined mid-turn: first the text so far, then deltas from where it ends.
            first = self._delta_frame({"message_id": shell.id, "offset": 0, "delta": shell.content})
            if first is not None:
                yield first
        while True:
            try:
                item = await asyncio.wait_for(self.sub.queue.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            kind = item.get("type")
            if kind == "delta":
                delta_frame = self._delta_frame(item)
                if delta_frame is not None:
                    yield delta_frame
            elif kind == "message":
                for frame in await self._catch_up():
                    yield frame
            elif kind == "approval":
                data = {k: v for k, v in item.items() if k not in ("type", "loop_id")}
                yield _frame("approval", self._next_id("a"), data)
            elif kind == "sent":  # a message sent to the loop, pending or applied now
                data = {k: v for k, v in item.items() if k not in ("type", "loop_id")}
                yield _frame("sent", self._next_id("i"), data)
            elif kind == "status" or item is RESYNC:
                for frame in await self._catch_up():
                    yield frame
                if item is RESYNC:
                    row = await self.hub.loop(self.state.pool, self.loop.id)
                    rows = await self.hub.transcript(self.state.pool, self.loop.id)
                    if row is None:
                        return
                    # Deltas sent while the listener was away (or dropped from a full
                    # queue) are in the partial saved with each of them: send what this
                    # stream has not shown from it, so the next delta follows on, no gap.
                    shell = streaming_partial(rows)
                    if shell is not None:
                        seed = self._delta_frame(
                            {"message_id": shell.id, "offset": 0, "delta": shell.content}
                        )
                        if seed is not None:
                            yield seed
                    status, extra = row.status, {"reason": row.status_reason}
                    if status == self.status:
                        continue
                else:
                    status = str(item.get("status"))
                    extra = {
                        "reason": item.get("reason"),
                        "error": item.get("error"),
                        "tool_call_id": item.get("tool_call_id"),
                    }
                yield self._status_frame(status, **extra)
                if status in END:
                    return


def _parse_last_event_id(value: str | None) -> Resume | None:
    if value is None or not value.strip():
        return None
    m = _EVENT_ID.match(value.strip())
    if m is None:
        raise ApiProblem(
            400,
            "Last-Event-ID is not an id this stream sent (m<N>, d<N>.<k>, s<N>.<k>, a<N>.<k>, "
            "i<N>.<k>)",
            problem_type="invalid-last-event-id",
        )
    streamed = (int(m.group(2)), int(m.group(3))) if m.group(2) else None
    return Resume(high=int(m.group(1)), streamed=streamed)


@router.get(
    "/loops/{loop_id}/stream",
    summary="Live events (Server-Sent Events)",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "An SSE stream: `status`, `delta`, `message`, `approval`, `sent` "
            "events "
            "(with `protocol=ag-ui`: AG-UI events).",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        204: {"description": "AG-UI: resumed after the run's last event, nothing new."},
        **problems.responses(400, 401, 404, 422, 429, 503),
    },
)
async def stream(
    loop_id: UUID,
    request: Request,
    last_event_id: Annotated[
        str | None,
        Header(alias="Last-Event-ID", max_length=100, description="Resume after this event."),
    ] = None,
    protocol: Annotated[
        Literal["agentd", "ag-ui"],
        Query(description="`ag-ui`: the same stream as AG-UI events (docs/api.md)."),
    ] = "agentd",
) -> Response:
    """Turns on `observed` for a loop that is not at rest (a turn in flight starts publishing
    deltas); ends when it completes, fails, stops or pauses. Writes nothing to a loop that
    is already observed or at rest."""
    slots: StreamSlots = request.app.state.stream_slots
    release = slots.take(StreamSlots.key(request.headers.get("authorization")))
    try:
        if protocol == "ag-ui":
            response = await agui.stream(request, loop_id, last_event_id)
        else:
            response = await _stream(request, loop_id, last_event_id)
    except BaseException:
        release()
        raise
    if isinstance(response, HeldStream):
        response.on_close.append(release)
    else:
        release()
    return response


async def _stream(request: Request, loop_id: UUID, last_event_id: str | None) -> Response:
    resume = _parse_last_event_id(last_event_id)
    state = app_state(request)
    async with connection(state.pool) as conn:
        if await loops.get(conn, loop_id=loop_id) is None:
            raise LoopNotFound(f"no loop {loop_id}")
    hub: StreamHub = request.app.state.stream_hub
    return await observed_stream(
        hub,
        state.pool,
        loop_id,
        state.lifecycle.observe,
        lambda sub, loop: LoopStream(request, sub, loop, resume).frames(),
    )


_AGUI_POST = {
    200: {
        "description": "The AG-UI events of the run the input started (as the GET stream).",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    },
    **problems.responses(400, 401, 403, 404, 409, 413, 422, 503),
}


@router.post(
    "/loops/{loop_id}/stream",
    summary="AG-UI input: continue the thread (RunAgentInput), answered with its run's events",
    response_class=StreamingResponse,
    responses=_AGUI_POST,
)
async def agui_input(
    loop_id: UUID,
    body: agui.RunInput,
    request: Request,
    protocol: Annotated[
        Literal["ag-ui"],
        Query(description="Only `ag-ui`: this POST is the AG-UI endpoint's (docs/api.md)."),
    ] = "ag-ui",
) -> Response:
    """The AG-UI `HttpAgent` endpoint of one loop: `threadId` must be the loop id. New user
    messages are sent to the loop (a loop at rest continues; a working one gets them
    queued), `state` is merged while it rests, and the answer is the AG-UI stream of the
    run (RUN_STARTED ... RUN_FINISHED)."""
    return await agui.run(request, body, agent=None, loop_id=loop_id)


@router.post(
    "/agents/{agent}/ag-ui",
    summary="AG-UI input: start or continue a thread of an agent (RunAgentInput)",
    response_class=StreamingResponse,
    responses=_AGUI_POST,
)
async def agui_agent_input(agent: str, body: agui.RunInput, request: Request) -> Response:
    """The AG-UI `HttpAgent` endpoint of an agent: a new `threadId` (a UUID) starts a loop
    with that id and the first user message; a known one continues it as the loop's own
    endpoint does."""
    return await agui.run(request, body, agent=agent, loop_id=None)

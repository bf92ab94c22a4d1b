"""AguiStream: one AG-UI connection, the loop's live feed (api/stream_hub.py) read and
turned into RunFrames' frames until the run ends; `stream` answers the GET."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from uuid import UUID

from fastapi import Request
from fastapi.responses import Response

from agentd.api.agui.events import (
    AGUI_VERSION,
    Resume,
    event,
    parse_last_event_id,
    snapshot_messages,
    status_value,
)
from agentd.api.agui.frames import RunFrames
from agentd.api.routes_loops import app_state
from agentd.api.stream_hub import (
    END,
    KEEPALIVE_SECONDS,
    StreamHub,
    Subscription,
    newest_assistant,
    observed_stream,
    streaming_partial,
)
from agentd.db.pool import connection
from agentd.errors import LoopNotFound
from agentd.store import loops, messages
from agentd.store.models import Loop, Message, ToolCall


class AguiStream(RunFrames):
    """The frames of one AG-UI connection: RunFrames fed from the loop's stream."""

    def __init__(
        self, request: Request, sub: Subscription, loop: Loop, resume: Resume | None
    ) -> None:
        super().__init__(loop)
        self.state = app_state(request)
        self.hub: StreamHub = request.app.state.stream_hub
        self.sub = sub
        self.resume = resume

    async def _catch_up(self) -> list[str]:
        pool, loop_id = self.state.pool, self.loop.id
        rows = await self.hub.messages_after(pool, loop_id, self.floor)
        fresh = [m for m in rows if m.id not in self.sent]
        calls = await self.hub.tool_calls(pool, loop_id) if fresh else []
        by_message: dict[int, list[ToolCall]] = {}
        for c in calls:
            by_message.setdefault(c.message_id, []).append(c)
        frames: list[str] = []
        for m in fresh:
            if m.is_summary:
                self.sent.add(m.id)
                continue
            self.sent.add(m.id)
            self.high = max(self.high, m.id)  # the message's own events carry its id
            frames += self._message(m, by_message.get(m.id, []))
        newest = newest_assistant(rows)
        if newest > self.floor:
            self.floor = newest
            self.sent = {i for i in self.sent if i > newest}
        return frames

    async def _reload(self) -> Loop | None:
        row = await self.hub.loop(self.state.pool, self.loop.id)
        if row is not None:
            self.loop = row
        return row

    # --- the connection ----------------------------------------------------------------

    async def frames(self) -> AsyncIterator[str]:
        try:
            async for frame in self._frames():
                yield frame
        finally:
            await self.hub.unsubscribe(self.sub)

    async def _start(self, rows: list[Message]) -> list[str]:
        calls = await self.hub.tool_calls(self.state.pool, self.loop.id)
        visible = [m for m in rows if not m.hidden]
        return [
            self._frame(
                event(
                    "RUN_STARTED",
                    threadId=self.thread_id,
                    runId=self.run_id,
                    protocolVersion=AGUI_VERSION,
                )
            ),
            self._frame(event("MESSAGES_SNAPSHOT", messages=snapshot_messages(visible, calls))),
            self._frame(event("STATE_SNAPSHOT", snapshot=self.loop.state)),
        ]

    async def _frames(self) -> AsyncIterator[str]:
        rows = await self.hub.transcript(self.state.pool, self.loop.id)
        shell = streaming_partial(rows)
        rows = [m for m in rows if not m.hidden]
        resume = self.resume
        if resume is None or resume.ended:
            # A new run: it starts after every message there is now.
            self.floor = newest_assistant(rows)
            self.sent = {m.id for m in rows if m.id > self.floor}
            self.high = max((m.id for m in rows), default=0)
            self.anchor = self.high
            for frame in await self._start(rows):
                yield frame
        else:
            self.anchor = resume.anchor
            self.floor = newest_assistant(rows, at_most=resume.high)
            self.sent = {
                m.id for m in rows if self.floor < m.id <= resume.high and m.role != "tool"
            }
            self.high = resume.high
            if resume.open_id is not None:
                # Deltas carry offsets: the client's text goes on from where it stopped.
                self.open_id, self.open_len = resume.open_id, resume.open_len
                self.deltas.mark(resume.open_id, resume.open_len)
            for frame in await self._catch_up():
                yield frame
        loop = self.loop
        yield self._frame(
            event(
                "CUSTOM",
                name="agentd.status",
                value=status_value(loop.status, loop.status_reason),
            )
        )
        if loop.status in END:
            for frame in self._finish(loop):
                yield frame
            return
        if shell is not None and shell.content:
            # Joined (or resumed) mid-turn: the text not shown yet, then deltas after it.
            for frame in self._on_delta(
                {"message_id": shell.id, "offset": 0, "delta": shell.content}
            ):
                yield frame
        while True:
            try:
                item = await asyncio.wait_for(self.sub.queue.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            kind = item.get("type")
            if kind == "delta":
                for frame in self._on_delta(item):
                    yield frame
            elif kind == "message":
                for frame in await self._catch_up():
                    yield frame
            elif kind == "approval":
                value = {k: v for k, v in item.items() if k not in ("type", "loop_id")}
                yield self._frame(event("CUSTOM", name="agentd.approval", value=value))
            elif kind in ("status", "resync", "state"):
                for frame in await self._catch_up():
                    yield frame
                row = await self._reload()
                if row is None:
                    return
                if kind == "resync":  # deltas missed meanwhile: from the saved partial
                    async with connection(self.state.pool) as conn:
                        rows = await messages.list_(conn, loop_id=self.loop.id, include_hidden=True)
                    shell = streaming_partial(rows)
                    if shell is not None:
                        for frame in self._on_delta(
                            {"message_id": shell.id, "offset": 0, "delta": shell.content}
                        ):
                            yield frame
                for frame in self._state_if_changed(row):
                    yield frame
                if kind == "state":
                    continue
                status = str(item.get("status")) if kind == "status" else row.status
                yield self._frame(
                    event(
                        "CUSTOM",
                        name="agentd.status",
                        value=status_value(status, item.get("reason", row.status_reason)),
                    )
                )
                if row.status in END and status in END:
                    for frame in self._finish(row):
                        yield frame
                    return


async def stream(request: Request, loop_id: UUID, last_event_id: str | None) -> Response:
    """The AG-UI stream of a loop (the route lives in api/streams.py)."""
    resume = parse_last_event_id(last_event_id)
    state = app_state(request)
    async with connection(state.pool) as conn:
        loop = await loops.get(conn, loop_id=loop_id)
        if loop is None:
            raise LoopNotFound(f"no loop {loop_id}")
        if resume is not None and resume.ended and loop.status in END:
            newer = await messages.list_after(conn, loop_id=loop_id, after_id=resume.high)
            if not newer:
                return Response(status_code=204)  # the run ended and nothing happened since
    hub: StreamHub = request.app.state.stream_hub
    return await observed_stream(
        hub,
        state.pool,
        loop_id,
        state.lifecycle.observe,
        lambda sub, loop: AguiStream(request, sub, loop, resume).frames(),
    )

"""Live loop pages: one shared LISTEN per app, fanned out to per-page queues as SSE.

A page gets `delta` events (streamed text of the turn in progress) and `refresh` events
(a message committed, the status changed, a decision was taken) on which it re-fetches its
server-rendered fragment, so the transcript is drawn by one template, never twice. An
open page costs a queue, never a database connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from uuid import UUID

from agentd import logs
from agentd.api.stream_hub import DeltaCursor
from agentd.db.listener import Listener

log = logs.get("agentd.admin.live")

CHANNEL = "agentd_stream"
QUEUE_SIZE = 500
KEEPALIVE_SECONDS = 15.0
_RESYNC: dict[str, Any] = {"type": "resync"}


class Hub:
    """Started by the first subscriber, stopped after the last one leaves."""

    def __init__(self, url: str, *, connect_timeout: float = 5.0) -> None:
        self.url = url
        self.connect_timeout = connect_timeout
        self._queues: dict[UUID, set[asyncio.Queue[dict[str, Any]]]] = {}
        self._listener: Listener | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._retired: set[asyncio.Task[None]] = set()  # stopping; awaited by close()

    @property
    def subscribers(self) -> int:
        return sum(len(q) for q in self._queues.values())

    @property
    def listening(self) -> bool:
        return self._task is not None

    @staticmethod
    def _push(queue: asyncio.Queue[dict[str, Any]], item: dict[str, Any]) -> None:
        try:
            queue.put_nowait(item)
        except asyncio.QueueFull:
            # A stalled page: drop its backlog; a refresh re-reads everything anyway.
            while not queue.empty():
                queue.get_nowait()
            queue.put_nowait(_RESYNC)

    def _on_notify(self, channel: str, payload: str) -> None:
        try:
            item = json.loads(payload)
            loop_id = UUID(str(item["loop_id"]))
        except (ValueError, KeyError, TypeError):
            log.warning("admin.stream_bad_payload", channel=channel)
            return
        for queue in self._queues.get(loop_id, ()):
            self._push(queue, item)

    def _on_reconnect(self) -> None:
        for queues in self._queues.values():
            for queue in queues:
                self._push(queue, _RESYNC)

    async def subscribe(self, loop_id: UUID) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=QUEUE_SIZE)
        # No await between the check and the start: one listener, however many pages.
        self._queues.setdefault(loop_id, set()).add(queue)
        if self._listener is None:
            self._stop = asyncio.Event()
            self._listener = Listener(
                self.url, [CHANNEL], self._on_notify, on_reconnect=self._on_reconnect
            )
            self._task = asyncio.create_task(
                self._listener.run(self._stop), name="admin-stream-listener"
            )
        listener = self._listener
        with contextlib.suppress(TimeoutError):
            # Without a connection yet the page still works: the listener keeps retrying
            # and sends a resync when it gets through.
            async with asyncio.timeout(self.connect_timeout):
                await listener.connected.wait()
        return queue

    def unsubscribe(self, loop_id: UUID, queue: asyncio.Queue[dict[str, Any]]) -> None:
        """Synchronous, so it also completes in a cancelled page's cleanup."""
        queues = self._queues.get(loop_id)
        if queues is not None:
            queues.discard(queue)
            if not queues:
                del self._queues[loop_id]
        if not self._queues and self._stop is not None:
            self._stop.set()  # the listener closes its connection and its task ends
            if self._task is not None:
                self._retired.add(self._task)
                self._task.add_done_callback(self._retired.discard)
            self._task = self._stop = self._listener = None

    async def close(self) -> None:
        for loop_id, queues in list(self._queues.items()):
            for queue in list(queues):
                self.unsubscribe(loop_id, queue)
        for task in list(self._retired):
            with contextlib.suppress(Exception):
                await task


def _frame(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n"


async def frames(
    hub: Hub,
    loop_id: UUID,
    partial: Callable[[], Awaitable[tuple[int, str] | None]] | None = None,
) -> AsyncIterator[str]:
    """The SSE body of one loop page; runs until the page goes away.

    `partial` reads the streaming shell's saved text (id, text): read after subscribing, it
    is sent first, and the deltas after it start where it ends (offsets, DeltaCursor).
    """
    queue = await hub.subscribe(loop_id)
    cursor = DeltaCursor()

    def delta_frame(item: dict[str, Any]) -> str | None:
        delta = cursor.take(item)
        if delta is None:
            return None
        data = {"message_id": delta.message_id, "offset": delta.offset, "delta": delta.text}
        return _frame("delta", data)

    try:
        # Anything between the page's render and this subscription is caught by a refresh.
        yield "retry: 2000\n\n" + _frame("refresh", {"reason": "connected"})
        shell = await partial() if partial is not None else None
        if shell is not None:
            first = delta_frame({"message_id": shell[0], "offset": 0, "delta": shell[1]})
            if first is not None:
                yield first
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            if item.get("type") == "delta":
                frame = delta_frame(item)
                if frame is not None:
                    yield frame
            else:
                yield _frame("refresh", {"reason": item.get("type"), "status": item.get("status")})
    finally:
        hub.unsubscribe(loop_id, queue)

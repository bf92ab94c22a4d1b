"""The live feed both streams read (api/streams.py, api/agui.py): ONE LISTEN per process.

The engine (in this process or any other) publishes JSON on the `agentd_stream` channel at
commit. `StreamHub` holds one listener connection and fans payloads out to per-loop
queues, so an SSE client never costs a database connection of its own while it waits.
A client too slow for its queue, or a reconnect of the listener, gets `RESYNC` instead of
what was lost: it re-reads from the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from agentd import logs
from agentd.db.listener import Listener
from agentd.errors import DatabaseUnavailable
from agentd.states import LoopStatus, MessageStatus
from agentd.store.models import Message

log = logs.get("agentd.api.stream_hub")

CHANNEL = "agentd_stream"
#: A stream ends once the loop rests here (a person or a new message moves it on).
END = frozenset({LoopStatus.COMPLETED, LoopStatus.FAILED, LoopStatus.STOPPED, LoopStatus.PAUSED})
KEEPALIVE_SECONDS = 15.0
QUEUE_SIZE = 1000
RESYNC: dict[str, Any] = {"type": "resync"}  # listener reconnected or a queue overflowed


@dataclass(eq=False)
class Subscription:
    loop_id: UUID
    queue: asyncio.Queue[dict[str, Any]] = field(
        default_factory=lambda: asyncio.Queue(maxsize=QUEUE_SIZE)
    )

    def push(self, item: dict[str, Any]) -> None:
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            # A stalled client: drop what is queued and re-read from the database instead.
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(RESYNC)


class StreamHub:
    """One LISTEN connection per process, started with the first subscriber, closed after
    the last one leaves."""

    def __init__(self, url: str, *, connect_timeout: float = 5.0) -> None:
        self.url = url
        self.connect_timeout = connect_timeout
        self._subs: dict[UUID, set[Subscription]] = {}
        self._lock = asyncio.Lock()
        self._listener: Listener | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None

    def subscribers(self) -> int:
        return sum(len(s) for s in self._subs.values())

    def _on_notify(self, channel: str, payload: str) -> None:
        try:
            item = json.loads(payload)
            loop_id = UUID(str(item["loop_id"]))
        except (ValueError, KeyError, TypeError):
            log.warning("stream.bad_payload", channel=channel)
            return
        for sub in self._subs.get(loop_id, ()):
            sub.push(item)

    def _resync_all(self) -> None:
        for subs in self._subs.values():
            for sub in subs:
                sub.push(RESYNC)

    async def subscribe(self, loop_id: UUID) -> Subscription:
        sub = Subscription(loop_id)
        async with self._lock:
            self._subs.setdefault(loop_id, set()).add(sub)
            if self._task is None:
                self._stop = asyncio.Event()
                self._listener = Listener(
                    self.url, [CHANNEL], self._on_notify, on_reconnect=self._resync_all
                )
                self._task = asyncio.create_task(
                    self._listener.run(self._stop), name="stream-listener"
                )
            listener = self._listener
        assert listener is not None
        try:
            # Listen before reading state, or a change in between would be missed.
            async with asyncio.timeout(self.connect_timeout):
                await listener.connected.wait()
        except TimeoutError:
            await self.unsubscribe(sub)
            raise DatabaseUnavailable("cannot LISTEN for live events") from None
        return sub

    async def unsubscribe(self, sub: Subscription) -> None:
        task = stop = None
        async with self._lock:
            subs = self._subs.get(sub.loop_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[sub.loop_id]
            if not self._subs and self._task is not None:
                task, stop = self._task, self._stop
                self._task = self._stop = self._listener = None
        if task is not None and stop is not None:
            stop.set()
            with contextlib.suppress(Exception):
                await task


def newest_assistant(rows: list[Message], at_most: int | None = None) -> int:
    """The id of the newest assistant message (with id <= at_most): a stream's resume floor,
    since the tool results of one turn never commit before their assistant message."""
    ids = [m.id for m in rows if m.role == "assistant" and (at_most is None or m.id <= at_most)]
    return max(ids, default=0)


def streaming_partial(rows: list[Message]) -> Message | None:
    """The shell a turn is streaming into, with the text it has saved so far (rows read
    with hidden ones): what a subscriber joining mid-turn is shown first."""
    shells = [
        m
        for m in rows
        if m.hidden and m.role == "assistant" and m.status == MessageStatus.PROCESSING
    ]
    newest = max(shells, key=lambda m: m.id, default=None)
    return newest if newest is not None and newest.content else None


@dataclass(frozen=True, slots=True)
class Delta:
    message_id: int
    offset: int
    text: str
    #: some text before `offset` never reached this connection (a NOTIFY-sized cut).
    gap: bool = False


class DeltaCursor:
    """What one connection has shown of each streamed message, so that every delta it
    sends starts exactly where the previous one ended.

    The engine's deltas carry `offset` (characters before them, store/events.delta_payload),
    and a subscriber may also have read a saved partial: the same text can reach it twice,
    from either side. The cursor drops what was shown and keeps only the rest.
    """

    def __init__(self) -> None:
        self._shown: dict[int, int] = {}

    def shown(self, message_id: int) -> int:
        return self._shown.get(message_id, 0)

    def mark(self, message_id: int, shown: int) -> None:
        """The client already shows `shown` characters of this message (a resumed stream)."""
        self._shown[message_id] = max(0, shown)

    def seed(self, message_id: int, text: str) -> Delta | None:
        """A saved partial read from the database; the part not shown yet, if any."""
        return self.take({"message_id": message_id, "offset": 0, "delta": text})

    def take(self, item: dict[str, Any]) -> Delta | None:
        mid, text, offset = item.get("message_id"), item.get("delta"), item.get("offset")
        if not isinstance(mid, int) or not isinstance(text, str):
            return None
        shown = self._shown.get(mid)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            # An engine from before offsets: its deltas are contiguous but unplaced.
            offset = 0 if shown is None else shown
        if shown is None:
            shown = 0 if offset == 0 else offset  # joined mid-stream with no partial read
            gap = False
        else:
            gap = offset > shown
        end = offset + len(text)
        if end <= shown:
            return None
        start = max(offset, shown)
        self._shown[mid] = end
        rest = text[start - offset :]
        return Delta(mid, start, rest, gap) if rest else None

    def forget(self, message_id: int) -> None:
        self._shown.pop(message_id, None)

"""The live feed both streams read (api/streams.py, api/agui.py): ONE LISTEN per process.

The engine (in this process or any other) publishes JSON on the `agentd_stream` channel at
commit. `StreamHub` holds one listener connection and fans payloads out to per-loop
queues, so an SSE client never costs a database connection of its own while it waits.
A client too slow for its queue, or a reconnect of the listener, gets `RESYNC` instead of
what was lost: it re-reads from the database.

Streams cost the database per loop, not per stream: what a stream reads when it opens or
when an event arrives (the loop, its transcript, its tool calls) goes through `StreamHub`'s
shared reads, one query serving every stream of the loop that asks for the same thing until
the loop's next event, and never more than `read_slots` of them at once, so streams cannot
take the pool from the worker and the rest of the API. `StreamSlots` caps the streams one
token holds open (429 with Retry-After beyond it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import UUID

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from agentd import logs
from agentd.api.problems import ApiProblem
from agentd.db.listener import Listener
from agentd.db.pool import Pool, connection
from agentd.errors import DatabaseUnavailable, LoopNotFound
from agentd.states import LoopStatus, MessageStatus
from agentd.store import loops, messages, tool_calls
from agentd.store.models import Loop, Message, ToolCall

T = TypeVar("T")

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

    def __init__(self, url: str, *, connect_timeout: float = 5.0, read_slots: int = 4) -> None:
        self.url = url
        self.connect_timeout = connect_timeout
        self._subs: dict[UUID, set[Subscription]] = {}
        # Shared reads per loop, each begun after the loop's latest event: an event drops
        # the loop's (they may not show it), so whatever is here is fresh enough for anyone.
        self._reads: dict[UUID, dict[Hashable, asyncio.Future[Any]]] = {}
        self.read_slots = asyncio.Semaphore(read_slots)
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
        self._reads.pop(loop_id, None)
        for sub in self._subs.get(loop_id, ()):
            sub.push(item)

    def _resync_all(self) -> None:
        self._reads.clear()
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
                    self._reads.pop(sub.loop_id, None)
            if not self._subs and self._task is not None:
                task, stop = self._task, self._stop
                self._task = self._stop = self._listener = None
        if task is not None and stop is not None:
            stop.set()
            with contextlib.suppress(Exception):
                await task

    # --- shared reads -----------------------------------------------------------------------

    async def shared(self, loop_id: UUID, what: Hashable, read: Callable[[], Awaitable[T]]) -> T:
        """`read()`'s result, shared by the streams of `loop_id` asking for `what` until the
        loop's next event; call it only while subscribed to the loop (after LISTEN is up).
        One waiter's cancel does not cancel the read the others wait for."""
        reads = self._reads.setdefault(loop_id, {}) if loop_id in self._subs else {}
        future = reads.get(what)
        if future is None or (future.done() and (future.cancelled() or future.exception())):
            future = asyncio.ensure_future(self._limited(read))
            future.add_done_callback(_retrieve)
            reads[what] = future
        return await asyncio.shield(future)

    async def _limited(self, read: Callable[[], Awaitable[T]]) -> T:
        async with self.read_slots:
            return await read()

    async def loop(self, pool: Pool, loop_id: UUID) -> Loop | None:
        async def read() -> Loop | None:
            async with connection(pool) as conn:
                return await loops.get(conn, loop_id=loop_id)

        return await self.shared(loop_id, "loop", read)

    async def transcript(self, pool: Pool, loop_id: UUID) -> list[Message]:
        """Every message of the loop, hidden ones included."""

        async def read() -> list[Message]:
            async with connection(pool) as conn:
                return await messages.list_(conn, loop_id=loop_id, include_hidden=True)

        return await self.shared(loop_id, "transcript", read)

    async def messages_after(self, pool: Pool, loop_id: UUID, after_id: int) -> list[Message]:
        async def read() -> list[Message]:
            async with connection(pool) as conn:
                return await messages.list_after(conn, loop_id=loop_id, after_id=after_id)

        return await self.shared(loop_id, ("after", after_id), read)

    async def tool_calls(self, pool: Pool, loop_id: UUID) -> list[ToolCall]:
        async def read() -> list[ToolCall]:
            async with connection(pool) as conn:
                return await tool_calls.list_for_loop(conn, loop_id=loop_id)

        return await self.shared(loop_id, "tool_calls", read)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """A shared read nobody awaits any more may fail unobserved: not worth a warning."""
    if not future.cancelled():
        future.exception()


class StreamSlots:
    """How many streams each token holds open; one more than `limit` is a 429."""

    RETRY_AFTER = 5

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[str, int] = {}

    @staticmethod
    def key(authorization: str | None) -> str:
        return hashlib.sha256((authorization or "").encode()).hexdigest()

    def held(self, key: str) -> int:
        return self._held.get(key, 0)

    def take(self, key: str) -> Callable[[], None]:
        """Take a slot for the token `key`; returns its release (safe to call twice)."""
        if self._held.get(key, 0) >= self.limit:
            raise ApiProblem(
                429,
                f"this token already holds {self.limit} open streams "
                "(AGENTD_MAX_STREAMS_PER_TOKEN); close one or retry later",
                problem_type="too-many-streams",
                headers={"Retry-After": str(self.RETRY_AFTER)},
            )
        self._held[key] = self._held.get(key, 0) + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            left = self._held.get(key, 0) - 1
            if left > 0:
                self._held[key] = left
            else:
                self._held.pop(key, None)

        return release


class HeldStream(StreamingResponse):
    """A streaming response that runs `on_close` when the connection is done with it, however
    it ended (even before its first frame: a generator's `finally` would not run then)."""

    def __init__(self, *args: Any, on_close: list[Callable[[], Awaitable[None] | None]], **kw: Any):
        super().__init__(*args, **kw)
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            for close in self.on_close:
                done = close()
                if done is not None:
                    await done


async def observed_stream(
    hub: StreamHub,
    pool: Pool,
    loop_id: UUID,
    observe: Callable[[UUID, bool], Awaitable[Loop]],
    frames: Callable[[Subscription, Loop], AsyncIterator[str]],
) -> HeldStream:
    """A live SSE response of `loop_id` (the agentd stream's and AG-UI's GET): subscribe,
    then read the loop, so no change between the two is missed; turn observing on for a
    loop still running (writes only then); unsubscribe when the connection is done."""
    sub = await hub.subscribe(loop_id)
    try:
        loop = await hub.loop(pool, loop_id)
        if loop is None:
            raise LoopNotFound(f"no loop {loop_id}")
        if not loop.observed and loop.status not in END:
            loop = await observe(loop_id, True)
    except BaseException:
        await hub.unsubscribe(sub)
        raise
    return HeldStream(
        frames(sub, loop),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        on_close=[lambda: hub.unsubscribe(sub)],
    )


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

    The engine's deltas carry `offset` (characters before them, store/events.delta_payloads),
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

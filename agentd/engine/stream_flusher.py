"""StreamFlusher: saves every streaming turn's partial answer, in one statement per tick.

Guarantee: every `stream_flush_interval` one batched UPDATE writes the latest partial of every
streaming shell of this process (fenced by each turn's execution token) and publishes the
deltas of observed loops in the same transaction, so hundreds of concurrent streams cost one
round trip per tick instead of one transaction per chunk — and a stream never waits on the
pool to read its next chunk. Streams someone watches are flushed more often, every
`stream_publish_interval`, in statements of their own: an observer's lag is bounded by that
shorter interval while the unwatched majority is still saved at the slower rate. The full
UPDATE also answers each loop's `observed` flag: a turn whose loop becomes observed
mid-flight (someone opened its stream) publishes from the next full tick on, starting with
one delta that holds the text so far.
Ordering: a flush and a stream's close take one lock, so a close waits for the flush in
flight (which may hold the shell's previous text) to commit before it saves and publishes
the tail; the turn's message commits after the close returns. Observers therefore get
every delta once, in order, before the message, whichever of them commits first would
otherwise have won (a late flush used to land after the tail: its text was lost and the
tail flagged as a gap). A delta too large for one notification is sent as several
(store/events.delta_payloads), never cut.
Tolerates: a database outage (partials are best-effort; the canonical answer is written by
ResponseParsing), shells closing between ticks.
Never: makes a partial visible (shells stay hidden until their turn commits); saves or
publishes a known secret, or a piece of one (redact.stream_prefix: the text is masked as the
transcript is, and a tail that may be a secret's start waits for the next tick).
Called by: NetworkCalling (submit/close), engine.service (run).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from agentd import logs, redact
from agentd.db.pool import Pool, transaction
from agentd.engine.ticks import ticks
from agentd.errors import DatabaseError
from agentd.store import events, messages

log = logs.get("agentd.stream_flusher")


@dataclass
class _Shell:
    loop_id: uuid.UUID
    token: uuid.UUID
    observed: bool
    secrets: redact.KnownSecrets | None
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    #: characters of the shown text (`text()`) already handed to a flush: the next
    #: delta's offset.
    flushed: int = 0
    dirty: bool = False

    def text(self, *, final: bool = False) -> str:
        """The text so far as observers may see it: known secrets masked, and a tail that
        could be the start of one held back until the next chunk (redact.stream_prefix)."""
        whole = "".join(self.content)
        self.content = [whole]  # join once per tick, not over every chunk again
        return redact.stream_prefix(whole, final=final, known=self.secrets)

    def reasoning_text(self) -> str | None:
        joined = "".join(self.reasoning)
        return redact.stream_prefix(joined, final=False, known=self.secrets) or None


class StreamFlusher:
    def __init__(
        self,
        pool: Pool,
        interval: float,
        *,
        publish_interval: float | None = None,
        secrets: redact.KnownSecrets | None = None,
    ) -> None:
        self.pool = pool
        self.secrets = secrets  # None: the set installed where the shell is read
        self.interval = interval
        # Observed streams' cadence: never slower than everyone's.
        self.publish_interval = min(interval, publish_interval or interval)
        self._shells: dict[int, _Shell] = {}
        # Held by a flush from its snapshot to its commit, and by a close: see Ordering.
        self._lock = asyncio.Lock()

    def open(self, shell_id: int, *, loop_id: uuid.UUID, token: uuid.UUID, observed: bool) -> None:
        self._shells[shell_id] = _Shell(
            loop_id=loop_id, token=token, observed=observed, secrets=self.secrets
        )

    def submit(self, shell_id: int, content: str, reasoning: str = "") -> None:
        shell = self._shells.get(shell_id)
        if shell is None:
            return
        if content:
            shell.content.append(content)
        if reasoning:
            shell.reasoning.append(reasoning)
        shell.dirty = True

    async def close(self, shell_id: int) -> None:
        """The stream ended: save and publish what observers have not seen yet, after any
        flush in flight and before the turn's commit (the caller commits after this)."""
        if shell_id not in self._shells:
            return
        async with self._lock:
            shell = self._shells.pop(shell_id, None)
            if shell is None or not shell.observed:
                return  # unobserved: the commit carries the text, no statement here
            # The tail redaction held back while the stream ran (a possible secret's
            # start) is due now, even when no token arrived since the last flush.
            if not shell.dirty and not shell.text(final=True)[shell.flushed :]:
                return
            try:
                await self._flush([(shell_id, shell)], final=True)
            except DatabaseError as exc:
                log.warning("stream_flusher.failed", error=str(exc))

    def discard(self, shell_id: int) -> None:
        self._shells.pop(shell_id, None)

    async def flush_once(self, *, observed_only: bool = False) -> int:
        """Flush every dirty shell (`observed_only`: only those whose loop is observed)."""
        async with self._lock:
            dirty = [
                (sid, s)
                for sid, s in self._shells.items()
                if s.dirty and (s.observed or not observed_only)
            ]
            if not dirty:
                return 0
            await self._flush(dirty)
            return len(dirty)

    async def _flush(self, dirty: list[tuple[int, _Shell]], *, final: bool = False) -> None:
        # Snapshot each shell's text and its new part together, before any await: the delta
        # published with a partial is exactly what that partial adds to the previous one,
        # so a subscriber can line deltas up against any partial it read (offsets).
        texts = [s.text(final=final) for _, s in dirty]
        starts = [s.flushed for _, s in dirty]
        for (_, s), text in zip(dirty, texts, strict=True):
            s.flushed = len(text)
            s.dirty = False
        try:
            async with transaction(self.pool) as conn:
                observed = await messages.update_partial_many(
                    conn,
                    ids=[sid for sid, _ in dirty],
                    contents=texts,
                    reasonings=[s.reasoning_text() for _, s in dirty],
                    tokens=[s.token for _, s in dirty],
                )
                payloads = []
                for (sid, s), text, start in zip(dirty, texts, starts, strict=True):
                    if not s.observed and observed.get(sid):
                        # Someone subscribed mid-turn: the first delta carries the text so far.
                        s.observed = True
                        start = 0
                    if s.observed and len(text) > start:
                        payloads.extend(_deltas(sid, s, offset=start, text=text[start:]))
                await events.publish_many(conn, payloads)
        except BaseException:
            for (_, s), start in zip(dirty, starts, strict=True):
                s.flushed = min(s.flushed, start)  # nothing was saved: the next tick retries
                s.dirty = True
            raise

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        last_full = -self.interval
        async for _ in ticks(self.publish_interval, stop, jitter=0.0):
            now = loop.time()
            # A tick that is late by a hair still counts as due (float steps of the clock).
            full = now - last_full >= self.interval - self.publish_interval / 2
            if full:
                last_full = now
            try:
                await self.flush_once(observed_only=not full)
            except DatabaseError as exc:
                log.warning("stream_flusher.failed", error=str(exc))


def _deltas(shell_id: int, shell: _Shell, *, offset: int, text: str) -> list[str]:
    return events.delta_payloads(
        loop_id=shell.loop_id, message_id=shell_id, offset=offset, text=text
    )

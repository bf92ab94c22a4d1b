"""StreamFlusher: saves every streaming turn's partial answer, in one statement per tick.

Guarantee: each tick writes the latest partial of every streaming shell of this process in
one batched UPDATE (fenced by each turn's execution token) and publishes the deltas of
observed loops in one statement, so hundreds of concurrent streams cost one round trip per
`stream_flush_interval` instead of one transaction per chunk — and a stream never waits on
the pool to read its next chunk. The UPDATE also answers each loop's `observed` flag: a
turn whose loop becomes observed mid-flight (someone opened its stream) publishes from the
next tick on, starting with one delta that holds the text so far.
Tolerates: a database outage (partials are best-effort; the canonical answer is written by
ResponseParsing), shells closing between ticks.
Never: makes a partial visible (shells stay hidden until their turn commits).
Called by: NetworkCalling (submit/close), engine.service (run).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field

from agentd import logs
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
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    dirty: bool = False


class StreamFlusher:
    def __init__(self, pool: Pool, interval: float) -> None:
        self.pool = pool
        self.interval = interval
        self._shells: dict[int, _Shell] = {}

    def open(self, shell_id: int, *, loop_id: uuid.UUID, token: uuid.UUID, observed: bool) -> None:
        self._shells[shell_id] = _Shell(loop_id=loop_id, token=token, observed=observed)

    def submit(self, shell_id: int, content: str, reasoning: str = "") -> None:
        shell = self._shells.get(shell_id)
        if shell is None:
            return
        shell.content.append(content)
        if reasoning:
            shell.reasoning.append(reasoning)
        if content:
            shell.pending.append(content)
        shell.dirty = True

    async def close(self, shell_id: int) -> None:
        """The stream ended: publish what observers have not seen yet, before the commit."""
        shell = self._shells.pop(shell_id, None)
        if shell is None or not (shell.observed and shell.pending):
            return
        try:
            async with transaction(self.pool) as conn:
                await events.publish_many(conn, [_delta(shell_id, shell)])
        except DatabaseError as exc:
            log.warning("stream_flusher.failed", error=str(exc))

    def discard(self, shell_id: int) -> None:
        self._shells.pop(shell_id, None)

    async def flush_once(self) -> int:
        dirty = [(sid, s) for sid, s in self._shells.items() if s.dirty]
        if not dirty:
            return 0
        ids = [sid for sid, _ in dirty]
        contents = ["".join(s.content) for _, s in dirty]
        reasonings = ["".join(s.reasoning) or None for _, s in dirty]
        tokens = [s.token for _, s in dirty]
        for _, s in dirty:
            s.dirty = False
        async with transaction(self.pool) as conn:
            observed = await messages.update_partial_many(
                conn, ids=ids, contents=contents, reasonings=reasonings, tokens=tokens
            )
            payloads = []
            for sid, s in dirty:
                if not s.observed and observed.get(sid):
                    # Someone subscribed mid-turn: the first delta carries the text so far.
                    s.observed = True
                    s.pending = list(s.content)
                if s.observed and s.pending:
                    payloads.append(_delta(sid, s))
                s.pending.clear()
            await events.publish_many(conn, payloads)
        return len(dirty)

    async def run(self, stop: asyncio.Event) -> None:
        async for _ in ticks(self.interval, stop, jitter=0.0):
            try:
                await self.flush_once()
            except DatabaseError as exc:
                log.warning("stream_flusher.failed", error=str(exc))


def _delta(shell_id: int, shell: _Shell) -> str:
    text = "".join(shell.pending)
    shell.pending.clear()
    payload: dict[str, object] = {
        "type": "delta",
        "loop_id": str(shell.loop_id),
        "message_id": shell_id,
        "delta": text,
    }
    if len(text.encode()) > 7000:  # NOTIFY payloads stop at 8000 bytes
        payload["delta"] = text[-2000:]
        payload["truncated"] = True  # the committed message carries the whole text
    return json.dumps(payload)

"""Observers never miss a delta: whatever the interleaving of timed flushes (one may be held
mid-statement, or fail), the stream's close and the turn's commit, an observer following
the NOTIFY feed with the API's DeltaCursor gets every character once, in order, with no gap
(`truncated`), before the `message` that ends the turn; joining mid-stream from the saved
partial included. Real PostgreSQL, real LISTEN, the real StreamFlusher."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentd.api.stream_hub import DeltaCursor
from agentd.db import pool as dbpool
from agentd.engine import stream_flusher
from agentd.engine.stream_flusher import StreamFlusher
from agentd.errors import DatabaseError
from agentd.store import events
from agentd.store.models import Loop
from agentd.testing import factories

CHANNEL = "agentd_stream"


@dataclass
class Harness:
    database_url: str
    runner: asyncio.Runner = field(default_factory=asyncio.Runner)
    received: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pool = self.runner.run(dbpool.create_pool(self.database_url, min_size=1, max_size=4))
        self.listener = self.runner.run(asyncpg.connect(self.database_url))
        self.runner.run(self.listener.add_listener(CHANNEL, self._on_notify))
        self.loop = self.runner.run(self._loop())

    def _on_notify(self, conn: object, pid: int, channel: str, payload: str) -> None:
        assert len(payload.encode()) < 8000  # NOTIFY's limit: never cut by the server
        self.received.append(json.loads(payload))

    async def _loop(self) -> Loop:
        async with dbpool.transaction(self.pool) as conn:
            row = await factories.loop(conn)
            return await factories.set_loop(conn, row.id, observed=True)

    def close(self) -> None:
        self.runner.run(self.listener.close())
        self.runner.run(self.pool.close())
        self.runner.close()


@pytest.fixture
def harness(database_url: str) -> Iterator[Harness]:
    h = Harness(database_url)
    try:
        yield h
    finally:
        h.close()


texts = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"),
    min_size=1,
    max_size=40,
) | st.builds(
    lambda c, n: c * n, st.sampled_from(["a", "é", "\U0001f600", '"']), st.integers(1500, 4000)
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("chunk"), texts),
        st.just(("flush",)),
        st.just(("hold",)),  # a timed flush that stays mid-statement until released
        st.just(("release",)),
        st.just(("fail",)),  # the next flush's statement fails
        st.just(("join",)),  # the observer subscribes now and reads the saved partial
    ),
    max_size=14,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=ops,
    known=st.booleans(),
    release_after_close=st.booleans(),
)
def test_every_delta_arrives_once_in_order_before_the_message(
    harness: Harness,
    steps: list[tuple[Any, ...]],
    known: bool,
    release_after_close: bool,
) -> None:
    harness.runner.run(_scenario(harness, steps, known, release_after_close))


async def _scenario(
    h: Harness, steps: list[tuple[Any, ...]], known: bool, release_after_close: bool
) -> None:
    loop = h.loop
    assert loop.execution_token is not None
    async with dbpool.transaction(h.pool) as conn:
        shell = await factories.shell(conn, loop, content="")
    flusher = StreamFlusher(h.pool, interval=60)
    # known: the turn knew its loop was observed; else it learns it from the first flush.
    flusher.open(shell.id, loop_id=loop.id, token=loop.execution_token, observed=known)
    real = stream_flusher.messages.update_partial_many
    gate = asyncio.Event()
    gate.set()
    fail = False

    async def statement(conn: Any, **kw: Any) -> dict[int, bool]:
        nonlocal fail
        await gate.wait()  # held: a flush in flight while the stream goes on and closes
        if fail and asyncio.current_task() is not closing:  # timed flushes fail, not the close
            fail = False
            raise asyncpg.exceptions.QueryCanceledError("canceling statement")
        return await real(conn, **kw)

    stream_flusher.messages.update_partial_many = statement  # type: ignore[assignment]
    held: list[asyncio.Task[int]] = []
    closing: asyncio.Task[None] | None = None
    full = ""
    start_at = 0  # index into h.received where this observer's subscription starts
    cursor = DeltaCursor()
    joined = False
    mark = len(h.received)
    try:
        for step in steps:
            kind = step[0]
            if kind == "chunk":
                flusher.submit(shell.id, step[1])
                full += step[1]
            elif kind == "flush":
                if gate.is_set():
                    await _flush(flusher)
            elif kind == "hold" and gate.is_set():
                gate.clear()
                held.append(asyncio.create_task(_flush(flusher)))
                await asyncio.sleep(0)  # it takes its snapshot and waits on the statement
            elif kind == "release":
                gate.set()
                await _settle(held)
            elif kind == "fail":
                fail = True
            elif kind == "join" and not joined:
                joined = True
                start_at = len(h.received)  # LISTEN first, then read (api/streams.py)
                saved = await h.pool.fetchval(
                    "SELECT content FROM messages WHERE id = $1", shell.id
                )
                cursor.seed(shell.id, saved or "")
        if not joined:
            start_at = mark
        state = flusher._shells[shell.id]
        closing = asyncio.create_task(flusher.close(shell.id))
        await asyncio.sleep(0)
        if release_after_close:
            await asyncio.sleep(0.01)  # the close waits on the held flush meanwhile
        gate.set()
        await _settle(held)
        await closing
        # The turn's commit, after the close returned (ResponseParsing).
        async with dbpool.transaction(h.pool) as conn:
            await events.publish_many(
                conn,
                [json.dumps({"type": "message", "loop_id": str(loop.id), "message_id": shell.id})],
            )
        await _until(lambda: _has_message(h.received[start_at:], shell.id))
    finally:
        stream_flusher.messages.update_partial_many = real  # type: ignore[assignment]
        gate.set()
        await _settle(held)
    shown = ""
    if joined:
        shown = full[: cursor.shown(shell.id)]
    for item in h.received[start_at:]:
        if item.get("message_id") != shell.id:
            continue
        if item["type"] == "message":
            break
        assert "truncated" not in item, item
        delta = cursor.take(item)
        if delta is None:
            continue
        assert not delta.gap, (delta, shown)
        assert delta.offset == len(shown)
        shown += delta.text
    if state.observed:
        assert shown == full  # every character, once, in order, before the message
    else:  # it never learnt of its observer before it closed: the message carries all
        assert shown == full[: len(shown)] and not known


async def _flush(flusher: StreamFlusher) -> int:
    try:
        return await flusher.flush_once()
    except (DatabaseError, asyncpg.PostgresError):
        return 0  # kept for the next flush (or the close)


async def _settle(tasks: list[asyncio.Task[int]]) -> None:
    for t in tasks:
        await t
    tasks.clear()


def _has_message(items: list[dict[str, Any]], message_id: int) -> bool:
    return any(i["type"] == "message" and i.get("message_id") == message_id for i in items)


async def _until(cond: Any, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, "the message notification never came"
        await asyncio.sleep(0.005)


def test_a_long_delta_is_split_never_cut() -> None:
    loop_id = uuid.uuid4()
    text = "x" * 5000 + "é" * 3000 + "\U0001f600" * 700 + "end"
    out = [
        json.loads(p)
        for p in events.delta_payloads(loop_id=loop_id, message_id=7, offset=11, text=text)
    ]
    assert len(out) > 1 and all("truncated" not in d for d in out)
    assert all(
        len(p.encode()) <= events.DELTA_PAYLOAD_BYTES
        for p in events.delta_payloads(loop_id=loop_id, message_id=7, offset=11, text=text)
    )
    assert "".join(d["delta"] for d in out) == text
    position = 11
    for d in out:
        assert d["offset"] == position
        position += len(d["delta"])
    short = events.delta_payloads(loop_id=loop_id, message_id=7, offset=0, text="hi")
    assert len(short) == 1 and json.loads(short[0])["delta"] == "hi"

"""StreamFlusher: each delta it publishes is exactly what the partial saved with it adds,
even when the stream keeps writing while the flush waits on the database."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import asyncpg
import pytest

from agentd.db.pool import Pool, transaction
from agentd.engine import stream_flusher
from agentd.engine.stream_flusher import StreamFlusher
from agentd.errors import DatabaseError
from agentd.testing import factories
from agentd.testing.engine import eventually


async def test_a_chunk_arriving_mid_flush_waits_for_the_next_partial(
    pool: Pool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn)
        await factories.set_loop(conn, loop.id, observed=True)
        shell = await factories.shell(conn, loop, content="")
    assert loop.execution_token is not None
    flusher = StreamFlusher(pool, interval=60)
    flusher.open(shell.id, loop_id=loop.id, token=loop.execution_token, observed=True)

    real = stream_flusher.messages.update_partial_many
    during: list[str] = []

    async def write_then_chunk(conn: Any, **kw: Any) -> dict[int, bool]:
        out = await real(conn, **kw)
        for chunk in during:  # the stream goes on while the statement runs
            flusher.submit(shell.id, chunk)
        during.clear()
        return out

    monkeypatch.setattr(stream_flusher.messages, "update_partial_many", write_then_chunk)
    seen: list[tuple[dict[str, Any], str]] = []
    listener = await asyncpg.connect(database_url)

    async def partial() -> str:
        return str(await pool.fetchval("SELECT content FROM messages WHERE id = $1", shell.id))

    def on_notify(*args: Any) -> None:
        seen.append((json.loads(args[3]), ""))

    await listener.add_listener("agentd_stream", on_notify)
    try:
        saved = []
        for chunk, mid in (("Let ", "l"), ("ook ", "at t"), ("he sum", "")):
            flusher.submit(shell.id, chunk)
            if mid:
                during.append(mid)
            await flusher.flush_once()
            saved.append(await partial())
        await flusher.close(shell.id)
        await eventually(lambda: _at_least(seen, 3))
    finally:
        await listener.close()
    deltas = [item for item, _ in seen]
    assert [d["type"] for d in deltas] == ["delta"] * 3
    # Each delta ends where the partial saved in its transaction ends...
    for delta, text in zip(deltas, saved, strict=True):
        assert delta["offset"] + len(delta["delta"]) == len(text)
    # ...and starts where the one before ended: together they spell the answer once.
    position = 0
    for delta in deltas:
        assert delta["offset"] == position
        position += len(delta["delta"])
    assert "".join(d["delta"] for d in deltas) == "Let look at the sum"
    assert saved == ["Let ", "Let look ", "Let look at the sum"]


async def _at_least(seen: list[Any], n: int) -> bool:
    return len(seen) >= n


async def test_a_failed_flush_keeps_its_text_for_the_next_one(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn)
        shell = await factories.shell(conn, loop, content="")
    assert loop.execution_token is not None
    flusher = StreamFlusher(pool, interval=60)
    flusher.open(shell.id, loop_id=loop.id, token=loop.execution_token, observed=False)
    flusher.submit(shell.id, "kept ")

    real = stream_flusher.messages.update_partial_many

    async def broken(conn: Any, **kw: Any) -> dict[int, bool]:
        raise asyncpg.exceptions.QueryCanceledError("canceling statement")

    monkeypatch.setattr(stream_flusher.messages, "update_partial_many", broken)
    with pytest.raises((asyncpg.PostgresError, DatabaseError)):  # raw or translated
        await flusher.flush_once()
    monkeypatch.setattr(stream_flusher.messages, "update_partial_many", real)
    flusher.submit(shell.id, "whole")
    assert await flusher.flush_once() == 1
    content = await pool.fetchval("SELECT content FROM messages WHERE id = $1", shell.id)
    assert content == "kept whole"


async def test_watched_streams_are_flushed_between_the_full_ticks(pool: Pool) -> None:
    """`flush_once(observed_only=True)` saves and publishes the watched shells alone; the
    unwatched one keeps its text for the next full flush."""
    async with transaction(pool) as conn:
        watched = await factories.loop(conn)
        await factories.set_loop(conn, watched.id, observed=True)
        unwatched = await factories.loop(conn)
        w_shell = await factories.shell(conn, watched, content="")
        u_shell = await factories.shell(conn, unwatched, content="")
    assert watched.execution_token is not None and unwatched.execution_token is not None
    flusher = StreamFlusher(pool, interval=60, publish_interval=0.1)
    flusher.open(w_shell.id, loop_id=watched.id, token=watched.execution_token, observed=True)
    flusher.open(u_shell.id, loop_id=unwatched.id, token=unwatched.execution_token, observed=False)
    flusher.submit(w_shell.id, "seen ")
    flusher.submit(u_shell.id, "later ")

    async def content(shell_id: int) -> str:
        return str(await pool.fetchval("SELECT content FROM messages WHERE id = $1", shell_id))

    assert await flusher.flush_once(observed_only=True) == 1
    assert (await content(w_shell.id), await content(u_shell.id)) == ("seen ", "")
    assert await flusher.flush_once(observed_only=True) == 0  # nothing new on the watched one
    assert await flusher.flush_once() == 1
    assert await content(u_shell.id) == "later "


async def test_run_flushes_everything_every_interval_and_watched_streams_in_between(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    flusher = StreamFlusher(pool, interval=0.3, publish_interval=0.05)
    calls: list[tuple[float, bool]] = []
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    async def record(*, observed_only: bool = False) -> int:
        calls.append((loop.time(), observed_only))
        if len([c for c in calls if not c[1]]) >= 3:
            stop.set()
        return 0

    monkeypatch.setattr(flusher, "flush_once", record)
    await asyncio.wait_for(flusher.run(stop), timeout=10)
    full = [t for t, only in calls if not only]
    assert calls[0][1] is False  # the first tick is a full one
    assert len(full) == 3 and all(b - a >= 0.3 - 0.05 for a, b in itertools.pairwise(full))
    between = [t for t, only in calls if only and full[0] < t < full[1]]
    assert len(between) >= 2  # watched streams flushed several times per full interval
    assert flusher.publish_interval == 0.05
    assert StreamFlusher(pool, interval=0.3, publish_interval=5).publish_interval == 0.3

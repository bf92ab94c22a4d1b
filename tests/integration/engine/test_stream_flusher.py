"""StreamFlusher: each delta it publishes is exactly what the partial saved with it adds,
even when the stream keeps writing while the flush waits on the database."""

from __future__ import annotations

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

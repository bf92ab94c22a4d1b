from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from agentd.db.pool import Pool
from agentd.registry import AgentRegistry
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

TOKEN = "operator-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ANSWER = "The sum of one and two is three, as you can see. " * 3


@contextlib.asynccontextmanager
async def worker_process(database_url: str, tmp_path: Path) -> AsyncIterator[None]:
    config = tmp_path / "agentd.toml"
    config.write_text('[agents.calc]\nclass = "agentd.testing.agents:CalcAgent"\n')
    env = {
        **os.environ,
        "AGENTD_DATABASE_URL": database_url,
        "AGENTD_HEARTBEAT_INTERVAL": "0.2",
        "AGENTD_LEASE_MARGIN": "2",
        "AGENTD_POLL_INTERVAL": "0.2",
        "AGENTD_STREAM_FLUSH_INTERVAL": "0.05",
        "AGENTD_SHUTDOWN_GRACE": "1",
        "AGENTD_LOG_LEVEL": "warning",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentd", "--config", str(config), "worker", env=env
    )
    try:
        yield
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), timeout=15)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def read_events(
    client: httpx.AsyncClient,
    lid: str,
    headers: dict[str, str] | None = None,
    sink: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Every SSE event of one connection, until the server ends the stream (appended to
    `sink` as they come, if given)."""
    events: list[dict[str, Any]] = [] if sink is None else sink
    current: dict[str, Any] = {}
    async with client.stream("GET", f"/v1/loops/{lid}/stream", headers=headers) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        async for line in r.aiter_lines():
            if not line:
                if current:
                    events.append(current)
                current = {}
            elif line.startswith(":"):
                continue
            else:
                key, _, value = line.partition(": ")
                current[key] = json.loads(value) if key == "data" else value
    return events


def script(fake: FakeLLM) -> None:
    slow = {"chunk_size": 6, "chunk_delay": 0.03}
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(
                content="Let me add those numbers for you.",
                tool_calls=[ToolCall("add", {"a": 1, "b": 2})],
                **slow,
            ),
        )
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content=ANSWER, **slow)))


@pytest.mark.slow
async def test_stream_follows_a_loop_run_by_a_worker_in_another_process(
    app: FastAPI, live_server, fake_llm: FakeLLM, database_url: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    script(fake_llm)
    async with (
        live_server(app) as base_url,
        httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client,
    ):
        r = await client.post(
            "/v1/loops",
            json={
                "agent": "calc",
                "message": "add 1 and 2",
                "state": {"llm": fake_llm.base_url, "stream": True},
                "observe": False,  # so that `observed` below says the stream is connected
            },
        )
        lid = r.json()["id"]
        reader = asyncio.create_task(read_events(client, lid))

        async def observed() -> bool:
            return (await client.get(f"/v1/loops/{lid}")).json()["observed"]

        await eventually(observed)  # the stream is connected before any turn is claimed
        async with worker_process(database_url, tmp_path):
            events = await asyncio.wait_for(reader, timeout=60)

        kinds = [e["event"] for e in events]
        assert kinds[0] == "status" and events[0]["data"]["status"] == "queued"
        assert events[-1]["event"] == "status" and events[-1]["data"]["status"] == "completed"
        messages = [e["data"] for e in events if e["event"] == "message"]
        assert [m["role"] for m in messages] == ["assistant", "tool", "assistant"]
        assert messages[0]["tool_calls"][0]["name"] == "add"
        assert messages[1]["content"] == "3" and messages[2]["content"] == ANSWER
        final_id = messages[2]["id"]
        deltas = [e["data"] for e in events if e["event"] == "delta"]
        final_deltas = "".join(d["delta"] for d in deltas if d["message_id"] == final_id)
        assert len([d for d in deltas if d["message_id"] == final_id]) >= 2
        assert final_deltas and ANSWER.startswith(final_deltas)
        # Deltas of a message come before the message itself.
        last_delta = max(i for i, e in enumerate(events) if e["event"] == "delta")
        last_message = max(i for i, e in enumerate(events) if e["event"] == "message")
        assert last_delta < last_message
        ids = [e["id"] for e in events]
        assert len(ids) == len(set(ids))
        assert [e["id"] for e in events if e["event"] == "message"] == [
            f"m{m['id']}" for m in messages
        ]

        # Resume after the first message: the rest is replayed, then the final status.
        first = next(e for e in events if e["event"] == "message")
        resumed = await read_events(client, lid, {"Last-Event-ID": first["id"]})
        assert [e["event"] for e in resumed] == ["message", "message", "status"]
        assert [e["data"]["role"] for e in resumed[:2]] == ["tool", "assistant"]
        assert resumed[-1]["data"]["status"] == "completed"

        # Resume from the initial status event: every message after it is replayed.
        resumed = await read_events(client, lid, {"Last-Event-ID": events[0]["id"]})
        assert [e["data"]["role"] for e in resumed if e["event"] == "message"] == [
            "assistant",
            "tool",
            "assistant",
        ]
        r = await client.get(f"/v1/loops/{lid}/stream", headers={"Last-Event-ID": "zzz"})
        assert r.status_code == 400
    assert app.state.stream_hub.subscribers() == 0


async def test_stream_of_a_paused_loop_sends_its_status_and_ends(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post("/v1/loops", json={"agent": "calc", "message": "hi"})
    lid = r.json()["id"]
    await client.post(f"/v1/loops/{lid}/pause")
    r = await client.get(f"/v1/loops/{lid}/stream")
    assert r.status_code == 200
    assert "event: status" in r.text and '"status": "paused"' in r.text


async def test_stream_ends_when_the_loop_is_stopped_over_rest(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    r = await client.post("/v1/loops", json={"agent": "calc", "message": "hi"})
    lid = r.json()["id"]
    reader = asyncio.create_task(client.get(f"/v1/loops/{lid}/stream"))

    async def subscribed() -> bool:
        return app.state.stream_hub.subscribers() == 1

    await eventually(subscribed)
    assert (await client.post(f"/v1/loops/{lid}/stop")).status_code == 200
    r = await asyncio.wait_for(reader, timeout=10)
    frames = [f for f in r.text.split("\n\n") if f.strip()]
    # The stream subscribes before it reads its opening snapshot (so nothing falls between
    # the two): on a loaded machine the stop can commit in that gap, and the snapshot
    # already says "stopped". Either way it opens with a status and ends on the stop.
    assert frames[0].startswith("id: ") and "event: status" in frames[0]
    assert '"status": "queued"' in frames[0] or '"status": "stopped"' in frames[0]
    assert '"status": "stopped"' in frames[-1] and "stopped_by_user" in frames[-1]
    # One name for the reason, as on the loop resource (`reason` kept for old clients).
    last = json.loads(frames[-1].split("data: ", 1)[1])
    assert last["status_reason"] == last["reason"] == "stopped_by_user"
    assert app.state.stream_hub.subscribers() == 0


LONG = "Counting slowly so the stream has time to open: " + " ".join(str(i) for i in range(60))


def slow_answer(fake: FakeLLM) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(content=LONG, chunk_size=4, chunk_delay=0.04),
        )
    )


async def start(client: httpx.AsyncClient, fake: FakeLLM, **kw: object) -> str:
    body = {"agent": "calc", "message": "count", "state": {"llm": fake.base_url, "stream": True}}
    r = await client.post("/v1/loops", json={**body, **kw})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def deltas_of(events: list[dict]) -> tuple[list[str], str]:  # type: ignore[type-arg]
    final = next(e["data"] for e in events if e["event"] == "message")
    parts = [
        e["data"]["delta"]
        for e in events
        if e["event"] == "delta" and e["data"]["message_id"] == final["id"]
    ]
    return parts, final["content"]


async def mid_stream(pool: Pool, lid: str, chars: int) -> bool:
    """The loop's turn has saved at least `chars` characters of its streamed answer."""
    text = await pool.fetchval(
        "SELECT content FROM messages WHERE loop_id = $1 AND status = 'processing'",
        uuid.UUID(lid),
    )
    return bool(text) and len(text) >= chars


def assert_contiguous(deltas: list[dict[str, Any]], text: str) -> None:
    """Each delta starts where the one before ended; together they spell `text`'s start."""
    position = 0
    for d in deltas:
        assert d["offset"] == position, deltas
        position += len(d["delta"])
    assert "".join(d["delta"] for d in deltas) == text[:position]


async def test_a_loop_started_over_rest_streams_its_first_turn_from_the_first_token(
    app: FastAPI,
    live_server,
    fake_llm: FakeLLM,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
) -> None:  # type: ignore[no-untyped-def]
    slow_answer(fake_llm)
    async with (
        live_server(app) as base_url,
        httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client,
    ):
        lid = await start(client, fake_llm)  # observe defaults to true
        assert (await client.get(f"/v1/loops/{lid}")).json()["observed"] is True
        async with running_engine(pool, database_url, registry):
            events = await read_events(client, lid)
    parts, content = deltas_of(events)
    assert content == LONG
    assert len(parts) >= 2 and "".join(parts) == LONG[: len("".join(parts))]
    assert "".join(parts).startswith("Counting")


async def test_a_turn_in_flight_starts_publishing_when_a_subscriber_arrives(
    app: FastAPI,
    live_server,
    fake_llm: FakeLLM,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
) -> None:  # type: ignore[no-untyped-def]
    slow_answer(fake_llm)
    async with (
        live_server(app) as base_url,
        httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client,
        running_engine(pool, database_url, registry),
    ):
        lid = await start(client, fake_llm, observe=False)

        await eventually(lambda: mid_stream(pool, lid, 8))  # the turn is mid-stream, unobserved
        events = await read_events(client, lid)
    parts, content = deltas_of(events)
    assert content == LONG
    # The first delta holds the text written before the stream opened, so the deltas
    # spell the answer from its first character.
    assert parts, [e["event"] for e in events]
    assert len(parts[0]) >= 8 and LONG.startswith(parts[0])
    assert "".join(parts) == LONG[: len("".join(parts))]


async def test_a_stream_opened_mid_turn_of_an_observed_loop_starts_with_the_text_so_far(
    app: FastAPI,
    live_server,
    fake_llm: FakeLLM,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
) -> None:  # type: ignore[no-untyped-def]
    """The loop is observed from its start (deltas are already flowing), so only the stream
    itself can hand a late subscriber what it missed: its saved partial, then deltas
    placed by offset so no character shows twice or goes missing."""
    slow_answer(fake_llm)
    async with (
        live_server(app) as base_url,
        httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client,
        running_engine(pool, database_url, registry),
    ):
        lid = await start(client, fake_llm)  # observed from the first token

        await eventually(lambda: mid_stream(pool, lid, 12))
        events = await read_events(client, lid)
    final = next(e["data"] for e in events if e["event"] == "message")
    deltas = [
        e["data"]
        for e in events
        if e["event"] == "delta" and e["data"]["message_id"] == final["id"]
    ]
    assert final["content"] == LONG and deltas
    assert deltas[0]["offset"] == 0 and len(deltas[0]["delta"]) >= 12
    assert not [d for d in deltas if "truncated" in d], deltas
    assert_contiguous(deltas, LONG)


async def test_a_stream_resumed_mid_turn_goes_on_from_the_last_character_it_showed(
    app: FastAPI,
    live_server,
    fake_llm: FakeLLM,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
) -> None:  # type: ignore[no-untyped-def]
    slow_answer(fake_llm)
    async with (
        live_server(app) as base_url,
        httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client,
        running_engine(pool, database_url, registry),
    ):
        lid = await start(client, fake_llm)
        first: list[dict[str, Any]] = []
        current: dict[str, Any] = {}
        async with client.stream("GET", f"/v1/loops/{lid}/stream") as r:
            async for line in r.aiter_lines():
                if line.startswith(("id", "event", "data")):
                    key, _, value = line.partition(": ")
                    current[key] = json.loads(value) if key == "data" else value
                elif not line and current:
                    first.append(current)
                    current = {}
                    if sum(e["event"] == "delta" for e in first) >= 3:
                        break  # the connection drops mid-turn
        last_id = first[-1]["id"]
        assert first[-1]["event"] == "delta" and last_id.count(".") == 3, last_id
        rest = await read_events(client, lid, headers={"Last-Event-ID": last_id})
    final = next(e["data"] for e in rest if e["event"] == "message")
    assert final["content"] == LONG
    deltas = [
        e["data"]
        for e in [*first, *rest]
        if e["event"] == "delta" and e["data"]["message_id"] == final["id"]
    ]
    assert_contiguous(deltas, LONG)


async def test_opening_the_stream_of_a_finished_loop_writes_nothing(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    r = await client.post("/v1/loops", json={"agent": "calc", "message": "hi", "observe": False})
    lid = r.json()["id"]
    await client.post(f"/v1/loops/{lid}/stop")
    before = (await client.get(f"/v1/loops/{lid}")).json()
    r = await client.get(f"/v1/loops/{lid}/stream")
    assert r.status_code == 200 and '"status": "stopped"' in r.text
    after = (await client.get(f"/v1/loops/{lid}")).json()
    assert after["observed"] is False
    assert after["updated_at"] == before["updated_at"]


async def read_until(
    client: httpx.AsyncClient, lid: str, deltas: int, headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The events of one connection until it has had `deltas` delta events (then it hangs
    up, as a dropped client does) or the server ends the stream."""
    events: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    async with client.stream("GET", f"/v1/loops/{lid}/stream", headers=headers) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line:
                if current:
                    events.append(current)
                current = {}
                if sum(e["event"] == "delta" for e in events) >= deltas:
                    break
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                current[key] = json.loads(value) if key == "data" else value
    return events


@pytest.mark.slow
async def test_observers_of_many_streaming_loops_get_every_token_once_before_the_message(
    app: FastAPI, live_server, fake_llm: FakeLLM, database_url: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A real worker streams several loops at once (flushes every 50 ms, so timed flushes
    meet closes and commits); each loop has one observer from the start and one that drops
    after a few deltas and reconnects with Last-Event-ID. Every observer's deltas spell the
    message exactly (not a prefix), with contiguous offsets, no `truncated`, all before the
    message; the resumed one goes on from the last character it showed."""
    answer = "".join(f"token{i} " for i in range(150))
    fake_llm.add(Rule(reply=Reply(content=answer, chunk_size=5, chunk_delay=0.01)))
    n = 6
    async with (
        live_server(app) as base_url,
        httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=60) as client,
    ):
        ids = [await start(client, fake_llm) for _ in range(n)]
        whole = [asyncio.create_task(read_events(client, lid)) for lid in ids]
        dropped = [asyncio.create_task(read_until(client, lid, 3)) for lid in ids]
        async with worker_process(database_url, tmp_path):
            firsts = await asyncio.wait_for(asyncio.gather(*dropped), timeout=60)
            resumed = [
                asyncio.create_task(read_events(client, lid, {"Last-Event-ID": first[-1]["id"]}))
                for lid, first in zip(ids, firsts, strict=True)
            ]
            alls = await asyncio.wait_for(asyncio.gather(*whole), timeout=60)
            rests = await asyncio.wait_for(asyncio.gather(*resumed), timeout=60)
    for events in alls:
        parts, content = deltas_of(events)
        assert content == answer
        assert "".join(parts) == answer  # every token arrived as a delta, once
        deltas = [e["data"] for e in events if e["event"] == "delta"]
        assert not any(d.get("truncated") for d in deltas)
        assert_contiguous(deltas, answer)
        last_delta = max(i for i, e in enumerate(events) if e["event"] == "delta")
        message = next(i for i, e in enumerate(events) if e["event"] == "message")
        assert last_delta < message
    for first, rest in zip(firsts, rests, strict=True):
        deltas = [e["data"] for e in (*first, *rest) if e["event"] == "delta"]
        assert not any(d.get("truncated") for d in deltas)
        assert_contiguous(deltas, answer)  # the resumed stream picks up where it stopped
        text = "".join(d["delta"] for d in deltas)
        message = next(e["data"] for e in rest if e["event"] == "message")
        assert message["content"] == answer
        if any(e["event"] == "delta" for e in rest):  # reconnected mid-stream
            assert text == answer
        else:  # the turn committed first: the replayed message carries the rest
            assert answer.startswith(text)


async def test_deltas_lost_to_a_listener_reconnect_are_sent_from_the_saved_partial(
    app: FastAPI, live_server, pool: Pool
) -> None:  # type: ignore[no-untyped-def]
    """The listener reconnected (RESYNC): deltas published meanwhile never reached this
    stream, but each was saved with its partial. The stream sends the part of the partial
    it has not shown, so the next delta follows on: no gap, no `truncated`."""
    from agentd.db.pool import transaction
    from agentd.store import events as store_events
    from agentd.testing import factories

    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running")
        await factories.set_loop(conn, loop.id, observed=True)
        shell = await factories.shell(conn, loop, content="Hello")
    lid = str(loop.id)
    hub = app.state.stream_hub
    async with (
        live_server(app) as base_url,
        httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client,
    ):
        seen: list[dict[str, Any]] = []
        reader = asyncio.create_task(read_events(client, lid, sink=seen))
        await eventually(lambda: _has_delta(seen))  # "Hello", read from the saved partial
        # Saved and published while the listener was away: the notification is lost.
        await pool.execute("UPDATE messages SET content = 'Hello, wor' WHERE id = $1", shell.id)
        hub._resync_all()  # what the listener's reconnect does
        async with transaction(pool) as conn:
            await conn.execute(
                "UPDATE messages SET content = 'Hello, world' WHERE id = $1", shell.id
            )
            await store_events.publish_many(
                conn,
                store_events.delta_payloads(
                    loop_id=loop.id, message_id=shell.id, offset=10, text="ld"
                ),
            )
        async with transaction(pool) as conn:
            await factories.set_loop(conn, loop.id, status="completed")
            await store_events.publish(
                conn, {"type": "status", "loop_id": lid, "status": "completed"}
            )
        events = await asyncio.wait_for(reader, timeout=10)
    deltas = [e["data"] for e in events if e["event"] == "delta"]
    assert "".join(d["delta"] for d in deltas) == "Hello, world", deltas
    assert not [d for d in deltas if d.get("truncated")], deltas
    assert_contiguous(deltas, "Hello, world")


async def _has_delta(seen: list[dict[str, Any]]) -> bool:
    return any(e["event"] == "delta" for e in seen)

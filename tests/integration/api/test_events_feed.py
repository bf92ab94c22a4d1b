from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.store import events
from agentd.store.models import NewEvent
from agentd.testing import factories
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule


async def _seed(pool: Pool) -> tuple[str, str]:
    async with connection(pool) as conn:
        a = await factories.loop(conn, agent="calc", status="completed")
        b = await factories.loop(conn, agent="seq", status="failed")
        await events.insert_many(
            conn,
            [
                NewEvent(name="loop.started", loop_id=a.id),
                NewEvent(name="loop.started", loop_id=b.id),
                NewEvent(name="loop.failed", loop_id=b.id, reason="turn_failed"),
                NewEvent(name="loop.completed", loop_id=a.id),
            ],
        )
        # Old enough to be served (the feed holds back events younger than a second).
        await conn.execute("UPDATE events SET created_at = now() - interval '5 seconds'")
    return str(a.id), str(b.id)


async def _all(client: httpx.AsyncClient, **params: str) -> list[dict]:
    out: list[dict] = []
    after: str | int = 0
    while True:
        page = (
            await client.get("/v1/events", params={**params, "after": after, "limit": 2})
        ).json()
        out.extend(page["items"])
        if page["next_cursor"] is None:  # caught up
            return out
        after = page["next_cursor"]


async def test_pages_cover_every_loop_in_id_order_and_filters_narrow_them(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    a, b = await _seed(pool)
    everything = await _all(client)
    assert [e["name"] for e in everything] == [
        "loop.started",
        "loop.started",
        "loop.failed",
        "loop.completed",
    ]
    assert [e["id"] for e in everything] == sorted(e["id"] for e in everything)
    assert {e["loop_id"] for e in everything} == {a, b}
    assert [e["name"] for e in await _all(client, loop=b)] == ["loop.started", "loop.failed"]
    assert [e["loop_id"] for e in await _all(client, agent="calc")] == [a, a]
    typed = await _all(client, types="loop.failed,loop.completed")
    assert [e["name"] for e in typed] == ["loop.failed", "loop.completed"]
    after = everything[1]["id"]
    rest = (await client.get("/v1/events", params={"after": after})).json()
    assert [e["id"] for e in rest["items"]] == [e["id"] for e in everything[2:]]


async def test_the_newest_events_are_held_back_until_they_settle(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    await _seed(pool)
    async with connection(pool) as conn:
        await events.insert_many(conn, [NewEvent(name="loop.started")])
    page = (await client.get("/v1/events")).json()
    assert len(page["items"]) == 4  # the fresh one is not served yet
    assert page["next_cursor"] is None  # caught up with what may be served
    await eventually(lambda: _count(client, 5), within=10)


async def _count(client: httpx.AsyncClient, n: int) -> bool:
    return len((await client.get("/v1/events")).json()["items"]) == n


async def test_a_read_only_token_reads_the_feed(app, make_client, pool: Pool) -> None:
    await _seed(pool)
    async with make_client(app, "read-only-token-for-tests") as reader:
        r = await reader.get("/v1/events")
    assert r.status_code == 200 and len(r.json()["items"]) == 4
    async with make_client(app, None) as anonymous:
        assert (await anonymous.get("/v1/events")).status_code == 401


async def test_bad_feed_parameters_are_4xx(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/events", params={"after": -1})).status_code == 422
    assert (await client.get("/v1/events", params={"loop": "nope"})).status_code == 422
    assert (await client.get("/v1/events", params={"limit": 0})).status_code == 422
    sse = await client.get(
        "/v1/events", headers={"Accept": "text/event-stream", "Last-Event-ID": "x1"}
    )
    assert sse.status_code == 400


async def test_sse_sends_ids_and_resumes_after_last_event_id(
    app,
    pool: Pool,
    live_server,
) -> None:
    await _seed(pool)
    async with connection(pool) as conn:
        ids = [r["id"] for r in await conn.fetch("SELECT id FROM events ORDER BY id")]
    async with live_server(app) as base:
        headers = {
            "Authorization": "Bearer operator-token-for-tests",
            "Accept": "text/event-stream",
            "Last-Event-ID": str(ids[1]),
        }
        got: list[tuple[int, str, dict]] = []
        async with (
            httpx.AsyncClient(base_url=base, timeout=10) as http,
            http.stream("GET", "/v1/events", headers=headers) as resp,
        ):
            assert resp.status_code == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            frame: dict[str, str] = {}
            async for line in resp.aiter_lines():
                if line.startswith(("id:", "event:", "data:")):
                    key, _, value = line.partition(":")
                    frame[key] = value.strip()
                elif line == "" and "id" in frame:
                    got.append((int(frame["id"]), frame["event"], json.loads(frame["data"])))
                    frame = {}
                    if len(got) == 2:
                        break
    assert [g[0] for g in got] == ids[2:]
    assert [g[1] for g in got] == ["loop.failed", "loop.completed"]
    assert got[0][2]["id"] == ids[2] and got[0][2]["reason"] == "turn_failed"


async def test_sse_without_a_position_tails_from_now(
    app,
    pool: Pool,
    live_server,
) -> None:
    await _seed(pool)
    async with live_server(app) as base:
        headers = {
            "Authorization": "Bearer operator-token-for-tests",
            "Accept": "text/event-stream",
        }
        async with (
            httpx.AsyncClient(base_url=base, timeout=15) as http,
            http.stream("GET", "/v1/events", headers=headers) as resp,
        ):
            lines = resp.aiter_lines()
            assert (await anext(lines)).startswith(":")  # the stream is open
            async with connection(pool) as conn:
                await events.insert_many(conn, [NewEvent(name="loop.stopped")])
            event = None
            async with asyncio.timeout(10):
                async for line in lines:
                    if line.startswith("event:"):
                        event = line.partition(":")[2].strip()
                        break
    assert event == "loop.stopped"  # the four seeded events were not replayed


async def test_a_rare_filter_scans_bounded_windows_and_its_cursor_still_advances(
    client: httpx.AsyncClient, pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _seed(pool)
    monkeypatch.setattr(events, "FEED_WINDOW", 1)
    monkeypatch.setattr(events, "FEED_MAX_WINDOWS", 2)
    async with connection(pool) as conn:
        ids = [r["id"] for r in await conn.fetch("SELECT id FROM events ORDER BY id")]
    start = ids[0] - 1
    first = (
        await client.get("/v1/events", params={"types": "loop.completed", "after": start})
    ).json()
    # Two windows of one id each: nothing matched yet, but the position moved on.
    assert first == {"items": [], "next_cursor": str(ids[1])}
    second = (
        await client.get("/v1/events", params={"types": "loop.completed", "after": ids[1]})
    ).json()
    assert [e["id"] for e in second["items"]] == [ids[3]] and second["next_cursor"] is None


async def test_wire_logs_in_the_feed_carry_their_body_as_on_the_loops_own_list(
    client: httpx.AsyncClient,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
) -> None:
    async with FakeLLM() as fake:
        fake.add(Rule(match=lambda last: True, reply=Reply(content="hello")))
        async with running_engine(pool, database_url, registry):
            r = await client.post(
                "/v1/loops",
                json={"agent": "calc", "message": "hi", "state": {"llm": fake.base_url}},
            )
            lid = r.json()["id"]

            async def completed() -> bool:
                return (await client.get(f"/v1/loops/{lid}")).json()["status"] == "completed"

            await eventually(completed)
    own = [
        e
        for e in (await client.get(f"/v1/loops/{lid}/events")).json()["items"]
        if e["name"] == "llm.request"
    ]
    assert own and own[0]["request_data"]["body"]  # the body as sent, rebuilt

    async def in_feed() -> list[dict]:
        page = await client.get("/v1/events", params={"loop": lid, "types": "llm.request"})
        return page.json()["items"]

    fleet = await eventually(in_feed)
    assert [e["request_data"] for e in fleet] == [e["request_data"] for e in own]

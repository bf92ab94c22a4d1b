"""POST /v1/loops:batch: many loops in one transaction, all or nothing, idempotent per item;
and the Python client's start_many."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from agentd.client import AsyncClient, Client
from agentd.client.errors import ApiError
from agentd.db.pool import Pool
from tests.integration.api.conftest import TOKEN

LLM = {"llm": "http://127.0.0.1:9"}


def item(message: str, **more: Any) -> dict[str, Any]:
    return {"agent": "calc", "message": message, "state": LLM, **more}


async def loop_count(pool: Pool) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM loops"))


async def test_a_batch_starts_every_loop_in_order(client: httpx.AsyncClient, pool: Pool) -> None:
    r = await client.post(
        "/v1/loops:batch",
        json={"loops": [item("one"), item("two", subject="s-2"), item("three")]},
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["replayed"] == []
    loops = body["loops"]
    assert [x["status"] for x in loops] == ["queued"] * 3
    assert loops[1]["subject"] == "s-2"
    firsts = [
        (await client.get(f"/v1/loops/{x['id']}/messages")).json()["items"][0]["content"]
        for x in loops
    ]
    assert firsts == ["one", "two", "three"]
    # Each is a new loop's first turn: claimed after loops already in flight.
    rows = await pool.fetch("SELECT loop_id, first_turn FROM jobs WHERE queue = 'llm'")
    assert {str(r["loop_id"]) for r in rows} == {x["id"] for x in loops}
    assert all(r["first_turn"] for r in rows)


async def test_an_item_key_used_again_answers_with_its_loop(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    batch = {"loops": [item("a", idempotency_key="k-a"), item("b", idempotency_key="k-b")]}
    first = await client.post("/v1/loops:batch", json=batch)
    again = await client.post("/v1/loops:batch", json=batch)
    assert first.status_code == again.status_code == 201
    assert [x["id"] for x in again.json()["loops"]] == [x["id"] for x in first.json()["loops"]]
    assert again.json()["replayed"] == [0, 1]
    assert await loop_count(pool) == 2
    # One old key among new items: only the new ones start.
    mixed = await client.post(
        "/v1/loops:batch", json={"loops": [item("c"), item("b", idempotency_key="k-b")]}
    )
    assert mixed.status_code == 201 and mixed.json()["replayed"] == [1]
    assert mixed.json()["loops"][1]["id"] == first.json()["loops"][1]["id"]
    assert await loop_count(pool) == 3
    # The keys are POST /v1/loops' Idempotency-Keys: the same key and body, the same loop.
    single = await client.post("/v1/loops", json=item("a"), headers={"Idempotency-Key": "k-a"})
    assert single.status_code == 201 and single.json()["id"] == first.json()["loops"][0]["id"]


async def test_two_concurrent_batches_with_the_same_keys_start_each_loop_once(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    batch = {"loops": [item(f"m{i}", idempotency_key=f"race-{i}") for i in range(20)]}
    a, b = await asyncio.gather(
        client.post("/v1/loops:batch", json=batch), client.post("/v1/loops:batch", json=batch)
    )
    assert a.status_code == b.status_code == 201
    assert [x["id"] for x in a.json()["loops"]] == [x["id"] for x in b.json()["loops"]]
    assert sorted([a.json()["replayed"], b.json()["replayed"]]) == [[], list(range(20))]
    assert await loop_count(pool) == 20


async def test_an_item_key_used_with_another_item_is_a_409_naming_it(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    first = await client.post("/v1/loops:batch", json={"loops": [item("a", idempotency_key="k")]})
    assert first.status_code == 201
    r = await client.post(
        "/v1/loops:batch",
        json={"loops": [item("new"), item("not a", idempotency_key="k")]},
    )
    assert r.status_code == 409
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["type"].endswith("/idempotency-key-reused")
    assert problem["index"] == 1 and "loops[1]" in problem["detail"]
    assert problem["loop_id"] == first.json()["loops"][0]["id"]
    assert await loop_count(pool) == 1  # the first item did not start either


async def test_an_invalid_item_rejects_the_whole_batch_naming_it(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    r = await client.post(
        "/v1/loops:batch", json={"loops": [item("ok"), item("ok too"), {"agent": "calc"}]}
    )
    assert r.status_code == 422
    problem = r.json()
    assert problem["type"].endswith("/validation-error")
    assert problem["index"] == 2 and "loops[2].message" in problem["detail"]
    assert [e["field"] for e in problem["errors"]] == ["body.loops[2].message"]
    assert await loop_count(pool) == 0


@pytest.mark.parametrize(
    "hostile",
    [
        '{"agent": "calc", "message": "hi", "state": {"x": NaN}}',
        '{"agent": "calc", "message": "a\\u0000b"}',
        '{"agent": "calc", "message": "hi", "idempotency_key": "k\\u0000"}',
        '{"agent": "calc", "message": "hi", "extra": 1}',
    ],
)
async def test_a_hostile_item_is_a_422_naming_it(
    client: httpx.AsyncClient, pool: Pool, hostile: str
) -> None:
    text = '{"loops": [{"agent": "calc", "message": "ok"}, ' + hostile + "]}"
    r = await client.post("/v1/loops:batch", content=text)
    assert r.status_code == 422, r.text
    assert r.json()["index"] == 1 and "loops[1]" in r.json()["detail"]
    assert await loop_count(pool) == 0


async def test_an_item_the_engine_refuses_rejects_the_whole_batch_naming_it(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    r = await client.post(
        "/v1/loops:batch",
        json={"loops": [item("ok"), {"agent": "nobody", "message": "hi"}, item("ok")]},
    )
    assert r.status_code == 422
    problem = r.json()
    assert problem["type"].endswith("/unknown-agent") and problem["agent"] == "nobody"
    assert problem["index"] == 1 and problem["detail"].startswith("loops[1]: ")
    assert await loop_count(pool) == 0  # item 0 had started: rolled back with the rest


async def test_one_key_twice_in_a_batch_is_a_422_naming_the_second(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    r = await client.post(
        "/v1/loops:batch",
        json={"loops": [item("a", idempotency_key="k"), item("b", idempotency_key="k")]},
    )
    assert r.status_code == 422 and r.json()["index"] == 1
    assert await loop_count(pool) == 0


@pytest.mark.parametrize("n", [0, 501])
async def test_a_batch_of_none_or_more_than_500_is_a_422(
    client: httpx.AsyncClient, pool: Pool, n: int
) -> None:
    r = await client.post("/v1/loops:batch", json={"loops": [item("x")] * n})
    assert r.status_code == 422
    assert [e["field"] for e in r.json()["errors"]] == ["body.loops"]
    assert "index" not in r.json()
    assert await loop_count(pool) == 0


async def test_start_many_through_the_clients(app: FastAPI, pool: Pool, live_server: Any) -> None:
    items = [item("one", idempotency_key="c-1"), item("two", max_cost="0.50")]
    async with AsyncClient(
        "http://agentd.test", TOKEN, transport=httpx.ASGITransport(app=app)
    ) as agentd:
        started = await agentd.start_many(items)
        assert [x.status for x in started] == ["queued", "queued"]
        assert started[1].state is not None and started[1].state["max_cost"] == "0.5"
        with pytest.raises(ApiError) as bad:
            await agentd.start_many([item("x"), {"agent": "calc", "message": " "}])
        assert bad.value.status == 422
    async with live_server(app) as url:

        def blocking() -> list[Any]:
            with Client(url, TOKEN) as agentd:
                return agentd.start_many([item("one", idempotency_key="c-1")])

        (again,) = await asyncio.to_thread(blocking)
    assert again.id == started[0].id
    assert await loop_count(pool) == 2

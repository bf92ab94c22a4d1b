from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx

from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool
from agentd.engine.janitor import Janitor
from agentd.registry import AgentRegistry
from agentd.testing.engine import fast_settings

BODY = {"agent": "calc", "message": "add 1 and 2", "state": {"llm": "http://127.0.0.1:9"}}


def keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


async def loop_count(pool: Pool) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM loops"))


async def test_same_key_and_body_answers_with_the_first_loop(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    first = await client.post("/v1/loops", json=BODY, headers=keyed("order-1"))
    again = await client.post("/v1/loops", json=BODY, headers=keyed("order-1"))
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["location"] == f"/v1/loops/{first.json()['id']}"
    assert await loop_count(pool) == 1


async def test_same_key_with_another_body_is_a_422_that_starts_nothing(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    first = await client.post("/v1/loops", json=BODY, headers=keyed("order-2"))
    other = await client.post(
        "/v1/loops", json={**BODY, "message": "add 2 and 3"}, headers=keyed("order-2")
    )
    assert other.status_code == 422
    assert other.headers["content-type"] == "application/problem+json"
    problem = other.json()
    assert problem["type"].endswith("/idempotency-key-reused")
    assert problem["loop_id"] == first.json()["id"]
    assert await loop_count(pool) == 1


async def test_different_keys_and_no_key_start_separate_loops(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    a = await client.post("/v1/loops", json=BODY, headers=keyed("a"))
    b = await client.post("/v1/loops", json=BODY, headers=keyed("b"))
    c = await client.post("/v1/loops", json=BODY)
    d = await client.post("/v1/loops", json=BODY)
    assert len({r.json()["id"] for r in (a, b, c, d)}) == 4
    assert await loop_count(pool) == 4


async def test_concurrent_requests_with_one_key_start_one_loop(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    answers = await asyncio.gather(
        *(client.post("/v1/loops", json=BODY, headers=keyed("racy")) for _ in range(8))
    )
    assert [r.status_code for r in answers] == [201] * 8
    assert len({r.json()["id"] for r in answers}) == 1
    assert sum("idempotent-replayed" not in r.headers for r in answers) == 1
    assert await loop_count(pool) == 1
    # The losers' starts were rolled back whole: one first message, one job.
    assert await pool.fetchval("SELECT count(*) FROM messages") == 1
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1


async def test_a_malformed_key_is_a_422(client: httpx.AsyncClient, pool: Pool) -> None:
    for bad in ("", " leading-space", "x" * 256, "caf\u00e9".encode()):
        r = await client.post("/v1/loops", json=BODY, headers={"Idempotency-Key": bad})
        assert r.status_code == 422, (bad, r.text)
    assert await loop_count(pool) == 0


async def test_a_key_past_its_window_starts_a_new_loop_and_the_janitor_prunes_it(
    pool: Pool, database_url: str, registry: AgentRegistry, make_client
) -> None:  # type: ignore[no-untyped-def]
    settings = fast_settings(idempotency_key_retention=timedelta(hours=1))
    state = AppState.create(
        settings=settings,
        pool=pool,
        registry=registry,
        database_url=database_url,
        api_token="t",
    )
    async with make_client(create_app(state), "t") as client:
        first = await client.post("/v1/loops", json=BODY, headers=keyed("old"))
        kept = await client.post("/v1/loops", json=BODY, headers=keyed("kept"))
        await pool.execute(
            "UPDATE loop_idempotency_keys SET created_at = now() - interval '2 hours'"
            " WHERE key = 'old'"
        )
        again = await client.post("/v1/loops", json=BODY, headers=keyed("old"))
        assert again.status_code == 201 and "idempotent-replayed" not in again.headers
        assert again.json()["id"] != first.json()["id"]
        # The key now names the new loop.
        third = await client.post("/v1/loops", json=BODY, headers=keyed("old"))
        assert third.json()["id"] == again.json()["id"]

        await pool.execute(
            "UPDATE loop_idempotency_keys SET created_at = now() - interval '2 hours'"
            " WHERE key = 'old'"
        )
        report = await Janitor(settings, pool).prune_once()
        assert report.idempotency_keys == 1
        keys = await pool.fetch("SELECT key FROM loop_idempotency_keys")
        assert [r["key"] for r in keys] == ["kept"]
        assert kept.status_code == 201

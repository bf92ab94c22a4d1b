"""Loop state is bounded (AGENTD_MAX_STATE_BYTES) however it is written, and loop lists
stay light: their items carry no state unless asked (issue 42)."""

from __future__ import annotations

import json
from collections.abc import Awaitable

import httpx
import pytest
from fastapi import FastAPI

from agentd.client import AsyncClient
from agentd.db.pool import Pool, connection
from agentd.settings import Settings
from agentd.testing import factories
from agentd.testing.engine import fast_settings

MERGE = {"Content-Type": "application/merge-patch+json"}
LIMIT = 2048
TOKEN = "operator-token-for-tests"


@pytest.fixture
def settings() -> Settings:
    return fast_settings(max_state_bytes=LIMIT)


def _patch(
    client: httpx.AsyncClient, lid: str, body: object, version: int
) -> Awaitable[httpx.Response]:
    headers = {**MERGE, "If-Match": f'"{version}"'}
    return client.patch(f"/v1/loops/{lid}/state", content=json.dumps(body), headers=headers)


async def _paused(pool: Pool, state: dict) -> str:  # type: ignore[type-arg]
    async with connection(pool) as conn:
        return str((await factories.loop(conn, status="paused", state=state)).id)


async def test_patches_cannot_grow_the_state_past_the_limit(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    lid = await _paused(pool, {})
    version = 1
    # Each patch is small; together they would grow the state without bound.
    for i in range(100):
        r = await _patch(client, lid, {f"k{i}": "x" * 100}, version)
        if r.status_code != 200:
            break
        version = r.json()["version"]
    assert r.status_code == 413, r.text
    problem = r.json()
    assert problem["type"].endswith("/state-too-large")
    assert problem["limit"] == LIMIT and problem["size"] > LIMIT
    assert "AGENTD_MAX_STATE_BYTES" in problem["detail"]
    # Nothing was written: the state and its version are as before the refused patch.
    got = (await client.get(f"/v1/loops/{lid}/state")).json()
    assert got["version"] == version and f"k{i}" not in got["state"]
    assert len(json.dumps(got["state"], separators=(",", ":"))) <= LIMIT
    # One large value at once is refused the same way.
    r = await _patch(client, lid, {"blob": "é" * LIMIT}, version)
    assert r.status_code == 413


async def test_a_state_already_over_the_limit_may_shrink_but_not_grow(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    lid = await _paused(pool, {"a": "x" * LIMIT, "b": "y" * LIMIT})  # e.g. the limit was lowered
    r = await _patch(client, lid, {"c": 1}, 1)
    assert r.status_code == 413
    r = await _patch(client, lid, {"b": None}, 1)
    assert r.status_code == 200, r.text  # smaller, though still over: allowed
    r = await _patch(client, lid, {"a": None}, 2)
    assert r.status_code == 200 and r.json()["state"] == {}


async def test_a_start_with_a_state_over_the_limit_is_refused_and_creates_nothing(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    body = {"agent": "calc", "message": "hi", "state": {"blob": "x" * LIMIT}}
    r = await client.post("/v1/loops", json=body)
    assert r.status_code == 413, r.text
    assert r.json()["type"].endswith("/state-too-large")
    async with connection(pool) as conn:
        assert await conn.fetchval("SELECT count(*) FROM loops") == 0
    r = await client.post("/v1/loops", json={**body, "state": {"small": 1}})
    assert r.status_code == 201, r.text


async def test_loop_lists_leave_the_state_out_unless_asked(
    client: httpx.AsyncClient, pool: Pool, app: FastAPI
) -> None:
    lid = await _paused(pool, {"plan": "pro", "notes": "n" * 1000})
    items = (await client.get("/v1/loops")).json()["items"]
    assert [i["id"] for i in items] == [lid] and items[0]["state"] is None
    assert items[0]["state_version"] == 1
    items = (await client.get("/v1/loops?include=state")).json()["items"]
    assert items[0]["state"]["plan"] == "pro"
    assert (await client.get(f"/v1/loops/{lid}")).json()["state"]["plan"] == "pro"
    assert (await client.get("/v1/loops?include=everything")).status_code == 422
    # The Python client: the same opt-in.
    async with AsyncClient(
        "http://agentd.test", TOKEN, transport=httpx.ASGITransport(app=app)
    ) as c:
        assert (await c.list()).items[0].state is None
        assert (await c.list(include_state=True)).items[0].state == {
            "plan": "pro",
            "notes": "n" * 1000,
        }

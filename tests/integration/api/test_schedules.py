from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool
from agentd.testing import agents
from agentd.testing.engine import fast_settings

TOKEN = "t0ken-for-schedules"


@pytest.fixture
async def client(pool: Pool, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = fast_settings()
    registry = agents.registry()
    state = AppState.create(
        settings=settings,
        pool=pool,
        registry=registry,
        database_url=database_url,
        api_token=TOKEN,
    )
    transport = httpx.ASGITransport(app=create_app(state))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://t", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as c:
        yield c


async def test_schedule_lifecycle_over_rest(client: httpx.AsyncClient) -> None:
    body = {
        "name": "daily-report",
        "agent": "calc",
        "message": "report",
        "cron": "30 6 * * 1-5",
        "timezone": "Europe/Paris",
        "overlap": "queue",
    }
    r = await client.post("/v1/schedules", json=body)
    assert r.status_code == 201, r.text
    out = r.json()
    assert len(out["next_runs"]) == 5 and out["overlap"] == "queue" and out["source"] == "api"
    assert (await client.post("/v1/schedules", json=body)).status_code == 409
    assert [s["name"] for s in (await client.get("/v1/schedules")).json()["items"]] == [
        "daily-report"
    ]
    paused = (await client.post("/v1/schedules/daily-report/pause")).json()
    assert paused["enabled"] is False and paused["next_runs"] == []
    resumed = (await client.post("/v1/schedules/daily-report/resume")).json()
    assert resumed["enabled"] is True and len(resumed["next_runs"]) == 5
    assert (await client.delete("/v1/schedules/daily-report")).status_code == 200
    r = await client.get("/v1/schedules/daily-report")
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"cron": "every morning"}, "cron"),
        ({"cron": None, "at": None}, "cron or at"),
        ({"timezone": "Nowhere/City"}, "timezone"),
        ({"at": "2026-12-01T09:00:00", "cron": None}, "offset"),
        ({"name": "Bad Name"}, "name"),
        ({"overlap": "sometimes"}, "overlap"),
    ],
)
async def test_bad_schedules_are_422_naming_the_problem(
    client: httpx.AsyncClient,
    patch: dict,
    field: str,  # type: ignore[type-arg]
) -> None:
    body = {"name": "x", "agent": "calc", "message": "m", "cron": "* * * * *", **patch}
    r = await client.post("/v1/schedules", json=body)
    assert r.status_code == 422, r.text
    assert field in r.text


async def test_unknown_agent_is_rejected(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/schedules", json={"name": "x", "agent": "nobody", "message": "m", "cron": "* * * * *"}
    )
    assert r.status_code == 422 and "nobody" in r.text

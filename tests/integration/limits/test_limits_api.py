"""The API shows provider back-offs and limits, takes a concurrency key on start, and
/metrics reports blocked providers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.store import providers
from agentd.testing.engine import fast_settings

TOKEN = "operator-token-for-tests"


@pytest.fixture
async def client(
    pool: Pool, database_url: str, registry: AgentRegistry
) -> AsyncIterator[httpx.AsyncClient]:
    settings = fast_settings()
    state = AppState.create(
        settings=settings,
        pool=pool,
        registry=registry,
        database_url=database_url,
        api_token=TOKEN,
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(state)),
        base_url="http://agentd.test",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as c:
        yield c


async def test_providers_lists_a_back_off_without_the_api_token(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    async with connection(pool) as conn:
        await providers.block(
            conn,
            provider_id="abc123",
            base_url="https://api.example.com",
            model="m1",
            key_fingerprint="0123456789ab",
            seconds=120,
            status=429,
        )
    r = await client.get("/v1/providers")
    assert r.status_code == 200, r.text
    [p] = r.json()["providers"]
    assert p["base_url"] == "https://api.example.com" and p["model"] == "m1"
    assert p["key_fingerprint"] == "0123456789ab" and p["last_status"] == 429
    assert 100 < p["blocked_seconds"] <= 120 and p["throttled"] == 1
    metrics = (await client.get("/metrics")).text
    assert "agentd_providers_blocked 1.0" in metrics
    assert 'agentd_provider_blocked_seconds{base_url="https://api.example.com"' in metrics


async def test_start_takes_a_concurrency_key_and_shows_it(client: httpx.AsyncClient) -> None:
    body = {"agent": "calc", "message": "hi", "state": {"llm": "http://127.0.0.1:9"}}
    r = await client.post(
        "/v1/loops", json={**body, "concurrency_key": "customer-7", "concurrency_limit": 3}
    )
    assert r.status_code == 201, r.text
    assert r.json()["concurrency"] == {"key": "customer-7", "limit": 3, "holding": False}
    got = (await client.get(r.headers["Location"])).json()
    assert got["concurrency"]["key"] == "customer-7"
    plain = await client.post("/v1/loops", json=body)
    assert plain.json()["concurrency"] is None


@pytest.mark.parametrize(
    "extra",
    [
        {"concurrency_limit": 2},
        {"concurrency_key": "k"},
        {"concurrency_key": "k", "concurrency_limit": 0},
    ],
)
async def test_start_refuses_a_half_given_concurrency_key(
    client: httpx.AsyncClient, extra: dict[str, object]
) -> None:
    body = {"agent": "calc", "message": "hi", "state": {}, **extra}
    r = await client.post("/v1/loops", json=body)
    assert r.status_code in (400, 422), r.text
    assert r.headers["content-type"].startswith("application/problem+json")

"""A database outage, as an API client and an operator see it: every route that needs the
database answers 503 `database-unavailable` (the type docs/api.md documents) with
Retry-After, and the log holds one warning line for the episode — no traceback, no
`api.unhandled` per request."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import structlog
from fastapi import FastAPI

from agentd.api.problems import Outages
from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db import pool as dbpool
from agentd.errors import DatabaseUnavailable
from agentd.registry import AgentRegistry
from agentd.testing.engine import fast_settings

TOKEN = "outage-operator-token"
LOOP = "00000000-0000-0000-0000-000000000001"
#: Routes that read or write the database, API and admin (the admin takes the bearer too).
NEEDS_DB = [
    ("GET", "/v1/loops", None),
    ("GET", f"/v1/loops/{LOOP}", None),
    ("GET", f"/v1/loops/{LOOP}/messages", None),
    ("POST", "/v1/loops", {"agent": "calc", "message": "hi"}),
    ("POST", f"/v1/loops/{LOOP}/pause", None),
    ("POST", f"/v1/loops/{LOOP}/messages", {"content": "more"}),
    ("POST", "/v1/tool-calls/1/approve", None),
    ("GET", "/v1/schedules", None),
    ("GET", "/v1/providers", None),
    ("GET", "/admin/loops", None),
    ("GET", "/admin", None),
]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def down_app(registry: AgentRegistry) -> AsyncIterator[FastAPI]:
    """The app on a pool whose server is down (nothing listens on its port)."""
    url = f"postgresql://postgres@127.0.0.1:{_closed_port()}/agentd"
    pool = await dbpool.create_pool(url, min_size=0, max_size=2)
    state = AppState.create(
        settings=fast_settings(), pool=pool, registry=registry, database_url=url, api_token=TOKEN
    )
    app = create_app(state)
    try:
        yield app
    finally:
        await app.state.admin_hub.close()
        await pool.close()


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
        base_url="http://agentd.test",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )


def _api_lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if str(e.get("event", "")).startswith("api.")]


async def test_an_outage_answers_database_unavailable_and_logs_one_line(
    down_app: FastAPI,
) -> None:
    with structlog.testing.capture_logs() as logs:
        async with _client(down_app) as c:
            for _ in range(3):  # many requests, one episode
                for method, path, body in NEEDS_DB:
                    r = await c.request(method, path, json=body)
                    assert r.status_code == 503, (method, path, r.status_code, r.text[:300])
                    problem = r.json()
                    assert problem["type"] == "https://agentd.dev/problems/database-unavailable"
                    assert r.headers["content-type"].startswith("application/problem+json")
                    assert r.headers["retry-after"] == "1"
            assert (await c.get("/healthz")).status_code == 200  # liveness is not the database
    lines = _api_lines(logs)
    assert [e["event"] for e in lines] == ["api.database_unavailable"], lines
    [line] = lines
    assert line["log_level"] == "warning"
    assert "exc_info" not in line and line["refused"] == 1


def test_the_documented_type_is_the_one_served() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[3] / "docs" / "api.md").read_text()
    assert "| 503 | `database-unavailable`" in doc
    assert DatabaseUnavailable.problem_type == "database-unavailable"


def test_a_long_outage_logs_a_line_per_interval_with_the_count_refused() -> None:
    now = [1000.0]
    outages = Outages(interval=30, clock=lambda: now[0])
    with structlog.testing.capture_logs() as logs:
        for _ in range(26):
            outages.refused("/v1/loops", ConnectionRefusedError())
            now[0] += 1  # 26 refusals in 26 s: within the interval
        now[0] += 30
        outages.refused("/v1/loops", ConnectionRefusedError())
    assert [(e["event"], e["refused"]) for e in logs] == [
        ("api.database_unavailable", 1),
        ("api.database_unavailable", 26),
    ]

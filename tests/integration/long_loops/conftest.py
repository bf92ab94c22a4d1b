from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from long_loops_kit import TOKEN, BudgetAgent, CompactingAgent

import agentd.admin
from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.testing import agents
from agentd.testing.engine import fast_settings
from agentd.testing.fake_llm import FakeLLM


@pytest.fixture
def registry() -> AgentRegistry:
    reg = agents.registry()
    reg.register("compacting", CompactingAgent)
    reg.register("budget", BudgetAgent)
    return reg


@pytest.fixture
def settings() -> Settings:
    return fast_settings()


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    agents.CALLS.clear()
    async with FakeLLM() as fake:
        yield fake


@pytest.fixture
def app_state(
    pool: Pool, database_url: str, registry: AgentRegistry, settings: Settings
) -> AppState:
    return AppState.create(
        settings=settings,
        pool=pool,
        registry=registry,
        database_url=database_url,
        api_token=TOKEN,
    )


@pytest.fixture
async def app(app_state: AppState) -> AsyncIterator[FastAPI]:
    app = create_app(app_state)
    agentd.admin.mount(app, app_state)
    yield app
    await app.state.admin_hub.close()


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://agentd.test",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as c:
        yield c


@pytest.fixture
async def admin(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A logged-in admin session; `admin.headers["x-csrf"]` holds the form token."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://agentd.test"
    ) as c:
        page = await c.get("/admin/login")
        nonce = re.search(r'name="nonce" value="([0-9a-f]+)"', page.text)
        assert nonce
        r = await c.post("/admin/login", data={"token": TOKEN, "nonce": nonce.group(1)})
        assert r.status_code == 303, r.text
        home = await c.get("/admin")
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', home.text)
        assert csrf
        c.headers["x-csrf"] = csrf.group(1)
        yield c

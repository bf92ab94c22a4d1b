from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from admin_kit import READ_TOKEN, TOKEN, Browser, anonymous, build_app, login, serve
from fastapi import FastAPI

from agentd.api.state import AppState
from agentd.db.pool import Pool
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.testing import agents
from agentd.testing.engine import fast_settings
from agentd.testing.fake_llm import FakeLLM


@pytest.fixture
def registry() -> AgentRegistry:
    return agents.registry()


@pytest.fixture
def settings() -> Settings:
    return fast_settings(read_tokens=[READ_TOKEN])


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
    app = build_app(app_state)
    yield app
    await app.state.admin_hub.close()


@pytest.fixture
def make_browser(app: FastAPI) -> Callable[[str], Awaitable[Browser]]:
    clients: list[httpx.AsyncClient] = []

    async def make(token: str = TOKEN) -> Browser:
        c = anonymous(app)
        clients.append(c)
        r = await login(c, token)
        assert r.status_code == 303, r.text
        return Browser(c)

    return make


@pytest.fixture
async def operator(make_browser) -> Browser:  # type: ignore[no-untyped-def]
    return await make_browser(TOKEN)


@pytest.fixture
async def reader(make_browser) -> Browser:  # type: ignore[no-untyped-def]
    return await make_browser(READ_TOKEN)


@pytest.fixture
def live_server():  # type: ignore[no-untyped-def]
    """`async with live_server(app) as base_url`: real HTTP, so SSE arrives live."""
    return serve

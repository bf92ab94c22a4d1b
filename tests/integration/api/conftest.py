from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.testing import agents
from agentd.testing.engine import eventually, fast_settings
from agentd.testing.fake_llm import FakeLLM

TOKEN = "operator-token-for-tests"
READ_TOKEN = "read-only-token-for-tests"


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
def app(app_state: AppState) -> FastAPI:
    return create_app(app_state)


def client_for(app: FastAPI, token: str | None = TOKEN) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://agentd.test", headers=headers
    )


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(app) as c:
        yield c


@pytest.fixture
def make_client():  # type: ignore[no-untyped-def]
    """`make_client(app, token)`: a client for any app and token (None: no header)."""
    return client_for


@contextlib.asynccontextmanager
async def serve(app: FastAPI) -> AsyncIterator[str]:
    """Serve `app` with uvicorn on a free local port (real HTTP, so SSE arrives live)."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[no-untyped-def,override]
            yield

    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_config=None, access_log=False, lifespan="off"
    )
    server = Server(config)
    task = asyncio.create_task(server.serve())
    await eventually(lambda: _started(server), within=10)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=10)


async def _started(server: object) -> bool:
    return bool(getattr(server, "started", False))


@pytest.fixture
def live_server():  # type: ignore[no-untyped-def]
    return serve

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.testing.agents import CalcAgent
from agentd.testing.engine import fast_settings
from agentd.testing.fake_llm import FakeLLM

TOKEN = "operator-token-for-tests"


class WorldAgent(CalcAgent):
    """The calculator agent, plus the MCP server whose URL the loop's state names."""

    def mcp_servers(self):  # type: ignore[no-untyped-def,override]
        return [{"name": "world", "url": str(self.state["mcp"]), "timeout": 10}]


@pytest.fixture
def registry() -> AgentRegistry:
    registry = AgentRegistry()
    registry.register("world", WorldAgent)
    return registry


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as fake:
        yield fake


@pytest.fixture
def settings() -> Settings:
    return fast_settings()


@pytest.fixture
def app(pool: Pool, database_url: str, registry: AgentRegistry, settings: Settings) -> FastAPI:
    state = AppState.create(
        settings=settings,
        pool=pool,
        registry=registry,
        database_url=database_url,
        api_token=TOKEN,
    )
    return create_app(state)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://agentd.test",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as c:
        yield c

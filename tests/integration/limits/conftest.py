from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentd.db import pool as dbpool
from agentd.db.pool import Pool
from agentd.registry import AgentRegistry
from agentd.testing import agents
from agentd.testing.fake_llm import FakeLLM


@pytest.fixture
def registry() -> AgentRegistry:
    return agents.registry()


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    agents.CALLS.clear()
    async with FakeLLM() as fake:
        yield fake


@pytest.fixture
async def second_pool(database_url: str) -> AsyncIterator[Pool]:
    """A second worker's own pool: the two engines share nothing but the database."""
    p = await dbpool.create_pool(database_url, min_size=1, max_size=8)
    try:
        yield p
    finally:
        await p.close()

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

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

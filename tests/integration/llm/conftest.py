from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentd.llm.client import LLMClient, RetryPolicy
from agentd.testing.fake_llm import FakeLLM


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as server:
        yield server


@pytest.fixture
async def client() -> AsyncIterator[LLMClient]:
    c = LLMClient(policy=RetryPolicy(retries=2, base_delay=0.01, max_delay=60.0))
    yield c
    await c.aclose()

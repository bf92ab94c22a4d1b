from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentd.registry import AgentRegistry
from agentd.testing import agents
from agentd.testing.agents import CalcAgent
from agentd.testing.fake_llm import FakeLLM


class Boss(CalcAgent):
    """Delegates to two calc agents (one under its own tool name) and a detached one."""

    agent_tools = [
        "calc",
        {"agent": "calc", "name": "helper", "description": "A second calculator."},
        {"agent": "calc", "name": "background", "detach": True},
    ]


class BudgetBoss(Boss):
    max_tokens_total = 1000


@pytest.fixture
def registry() -> AgentRegistry:
    reg = agents.registry()
    reg.register("boss", Boss)
    reg.register("budget_boss", BudgetBoss)
    return reg


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    agents.CALLS.clear()
    async with FakeLLM() as fake:
        yield fake

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

import agentd.admin
from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool
from agentd.registry import AgentRegistry
from agentd.testing import agents
from agentd.testing.agents import CalcAgent
from agentd.testing.engine import fast_settings
from agentd.testing.fake_llm import FakeLLM

TOKEN = "children-test-token"


class Boss(CalcAgent):
    """Delegates to two calc agents (one under its own tool name) and a detached one."""

    agent_tools = [
        "calc",
        {"agent": "calc", "name": "helper", "description": "A second calculator."},
        {"agent": "calc", "name": "background", "detach": True},
    ]


class BudgetBoss(Boss):
    max_tokens_total = 1000


class Middle(CalcAgent):
    """A child that delegates in turn (depth 2 under GrandBoss)."""

    agent_tools = ["calc"]


class GrandBoss(CalcAgent):
    agent_tools = ["middle"]


class SequentialBoss(Boss):
    sequential_tool_calls = True


class ProbeBoss(CalcAgent):
    """Delegates to the probe agent, whose slow_add a test holds with a file."""

    agent_tools = ["probe"]


class LostBoss(CalcAgent):
    """Names an agent no one registered."""

    agent_tools = ["nobody"]


class ThriftyCalc(CalcAgent):
    """A calculator with its own budgets, smaller than a BudgetBoss / CostBoss leaves."""

    max_tokens_total = 100
    max_cost = "0.01"


class LavishCalc(CalcAgent):
    """A calculator whose own budgets are larger than any parent here has."""

    max_tokens_total = 1_000_000
    max_cost = "500"


class ThriftyBoss(CalcAgent):
    max_tokens_total = 1000
    agent_tools = ["thrifty", "lavish"]


class CostBoss(CalcAgent):
    max_cost = "2"
    agent_tools = ["thrifty", "lavish"]


@pytest.fixture
def registry() -> AgentRegistry:
    reg = agents.registry()
    reg.register("boss", Boss)
    reg.register("budget_boss", BudgetBoss)
    reg.register("thrifty", ThriftyCalc)
    reg.register("middle", Middle)
    reg.register("grand_boss", GrandBoss)
    reg.register("probe_boss", ProbeBoss)
    reg.register("sequential_boss", SequentialBoss)
    reg.register("lost_boss", LostBoss)
    reg.register("lavish", LavishCalc)
    reg.register("thrifty_boss", ThriftyBoss)
    reg.register("cost_boss", CostBoss)
    return reg


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    agents.CALLS.clear()
    async with FakeLLM() as fake:
        yield fake


@pytest.fixture
async def client(
    pool: Pool, database_url: str, registry: AgentRegistry
) -> AsyncIterator[httpx.AsyncClient]:
    state = AppState.create(
        settings=fast_settings(), pool=pool, registry=registry, database_url=database_url,
        api_token=TOKEN,
    )  # fmt: skip
    app: FastAPI = create_app(state)
    agentd.admin.mount(app, state)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://agentd.test",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as c:
        yield c
    await app.state.admin_hub.close()

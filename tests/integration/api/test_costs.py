"""Cost per message, per loop and per agent: computed at finalize from the usage and the
price table, rolled up in the finalize, shown by the REST API and Prometheus, and the
per-loop cost budget that pauses a loop like the token budget."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from decimal import Decimal

import httpx
import pytest
from prometheus_client import generate_latest

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.store import loops
from agentd.store.models import Loop
from agentd.testing import agents
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

READ_TOKEN = "read-only-token-for-tests"
# fake-model: 2 USD per million input tokens, 0.5 cached, 8 output.
PRICES = {"fake-model": {"input": "2", "cached_input": "0.5", "output": "8"}}


class MysteryAgent(agents.CalcAgent):
    model = "mystery-model"  # in no price table


class PricedAgent(agents.CalcAgent):
    prices = {"input": 10, "output": 10}  # its own price wins over [prices.*]
    max_cost = "0.0015"


@pytest.fixture
def settings() -> Settings:
    return fast_settings(read_tokens=[READ_TOKEN], prices=PRICES)


@pytest.fixture
def registry() -> AgentRegistry:
    reg = agents.registry()
    reg.register("mystery", MysteryAgent)
    reg.register("priced", PricedAgent)
    return reg


def add_then_answer(fake: FakeLLM) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(
                content="Adding.", tool_calls=[ToolCall("add", {"a": 1, "b": 2})], usage=(1000, 100)
            ),
        )
    )
    fake.add(
        Rule(
            match=lambda last: last.role == "tool",
            reply=Reply(content="The sum is 3.", usage=(1200, 50), chunk_size=3),
        )
    )


def in_status(pool: Pool, loop_id: uuid.UUID, status: str) -> Callable[[], Awaitable[Loop | None]]:
    async def check() -> Loop | None:
        async with connection(pool) as conn:
            row = await loops.get(conn, loop_id=loop_id)
        return row if row is not None and row.status == status else None

    return check


async def test_cost_per_message_loop_agent_and_metric(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    settings: Settings,
    fake_llm: FakeLLM,
    client: httpx.AsyncClient,
) -> None:
    add_then_answer(fake_llm)
    r = await client.post(
        "/v1/loops",
        json={
            "agent": "calc",
            "message": "add 1 and 2",
            "state": {"llm": fake_llm.base_url, "stream": True},
        },
    )
    lid = uuid.UUID(r.json()["id"])
    assert r.json()["cost"] is None and r.json()["cost_unpriced_turns"] == 0
    async with running_engine(pool, database_url, registry, settings=settings) as engine:
        row = await eventually(in_status(pool, lid, "completed"))
        scraped = generate_latest(engine.telemetry.registry).decode()

    # 1000*2 + 100*8 = 2800 µ$; 1200*2 + 50*8 = 2800 µ$: exact, in the database too.
    assert row.cost == Decimal("0.0056")
    shown = (await client.get(f"/v1/loops/{lid}")).json()
    assert shown["cost"] == "0.0056" and shown["cost_unpriced_turns"] == 0
    assert shown["tokens"]["reasoning"] == 0
    speed = shown["speed"]
    assert speed["generation_seconds"] > 0 and speed["tps"] > 0
    assert speed["ttft_turns"] >= 1 and speed["ttft_mean"] == pytest.approx(
        speed["ttft_total"] / speed["ttft_turns"]
    )

    items = (await client.get(f"/v1/loops/{lid}/messages")).json()["items"]
    assistants = [m for m in items if m["role"] == "assistant"]
    assert [m["cost"] for m in assistants] == ["0.0028", "0.0028"]
    assert {m["model"] for m in assistants} == {"fake-model"}
    assert all(m["tps"] > 0 for m in assistants)
    assert assistants[1]["ttft"] is not None  # streamed text: a first token
    assert all(m["cost"] is None for m in items if m["role"] != "assistant")

    costs = (await client.get("/v1/costs")).json()
    (calc,) = costs["agents"]
    assert calc["agent"] == "calc" and calc["cost"] == "0.0056" and calc["loops"] == 1
    assert calc["tokens"] == {
        "prompt": 2200, "completion": 150, "cached": 0, "reasoning": 0, "estimated": False,
    }  # fmt: skip
    assert calc["models"] == [
        {"model": "fake-model", "cost": "0.0056", "turns": 2, "unpriced_turns": 0}
    ]
    assert 'agentd_llm_cost_usd_total{agent="calc",model="fake-model"} 0.0056' in scraped
    # The deprecated name (no unit) still carries the same value.
    assert 'agentd_llm_cost_total{agent="calc",model="fake-model"} 0.0056' in scraped

    # A window before the loop started has nothing; a backwards one is a 400.
    assert (await client.get("/v1/costs", params={"until": "2000-01-01T00:00:00Z"})).json()[
        "agents"
    ] == []
    bad = await client.get(
        "/v1/costs", params={"since": "2030-01-02T00:00:00Z", "until": "2030-01-01T00:00:00Z"}
    )
    assert bad.status_code == 400 and bad.json()["type"].endswith("invalid-window")


async def test_an_unknown_model_has_a_null_cost_not_zero(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    settings: Settings,
    fake_llm: FakeLLM,
    client: httpx.AsyncClient,
) -> None:
    add_then_answer(fake_llm)
    async with running_engine(pool, database_url, registry, settings=settings) as engine:
        loop = await engine.lifecycle.start(
            agent="mystery", message="go", state={"llm": fake_llm.base_url}
        )
        await eventually(in_status(pool, loop.id, "completed"))
        scraped = generate_latest(engine.telemetry.registry).decode()
    shown = (await client.get(f"/v1/loops/{loop.id}")).json()
    assert shown["cost"] is None and shown["cost_unpriced_turns"] == 2
    items = (await client.get(f"/v1/loops/{loop.id}/messages")).json()["items"]
    assert [m["cost"] for m in items if m["role"] == "assistant"] == [None, None]
    (mystery,) = (await client.get("/v1/costs", params={"agent": "mystery"})).json()["agents"]
    assert mystery["cost"] is None and mystery["unpriced_turns"] == 2
    assert mystery["models"] == [
        {"model": "mystery-model", "cost": None, "turns": 2, "unpriced_turns": 2}
    ]
    assert "agentd_llm_cost_usd_total{" not in scraped and "agentd_llm_cost_total{" not in scraped


async def test_cost_budget_pauses_the_loop_and_the_start_request_overrides_it(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    settings: Settings,
    fake_llm: FakeLLM,
    client: httpx.AsyncClient,
) -> None:
    add_then_answer(fake_llm)
    # The agent's own price (10 USD/M both ways): the first turn costs 0.011, over its
    # max_cost of 0.0015, so the loop pauses before the second model call.
    r = await client.post(
        "/v1/loops",
        json={"agent": "priced", "message": "go", "state": {"llm": fake_llm.base_url}},
    )
    budgeted = uuid.UUID(r.json()["id"])
    # A start request's max_cost wins over the agent's, kept in state as a decimal string.
    r = await client.post(
        "/v1/loops",
        json={
            "agent": "priced",
            "message": "go",
            "state": {"llm": fake_llm.base_url},
            "max_cost": 1,
        },
    )
    assert r.status_code == 201, r.text
    assert r.json()["state"]["max_cost"] == "1"
    roomy = uuid.UUID(r.json()["id"])
    bad = await client.post("/v1/loops", json={"agent": "priced", "message": "go", "max_cost": -1})
    assert bad.status_code == 422
    async with running_engine(pool, database_url, registry, settings=settings):
        row = await eventually(in_status(pool, budgeted, "paused"))
        await eventually(in_status(pool, roomy, "completed"))
    assert row.status_reason == "cost_budget_exceeded"
    assert row.error_message == "cost budget (max_cost 0.0015 USD) reached: 0.011 USD spent"
    assert row.step_count == 1 and row.cost == Decimal("0.011")
    assert (await client.get(f"/v1/loops/{roomy}")).json()["cost"] == "0.0235"

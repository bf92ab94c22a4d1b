"""A loop paused by max_steps, its token budget or its cost budget is not a dead end: resume
with raised limits (kept in the loop's state) and it goes on; a plain resume pauses it
again."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.store import loops
from agentd.store.models import Loop
from agentd.testing.agents import CalcAgent
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

TOKEN = "operator-token-raise-limits"


class OneStep(CalcAgent):
    max_steps = 1


class SmallBudget(CalcAgent):
    max_tokens_total = 10  # the first turn spends more than this


class SmallSpend(CalcAgent):
    prices = {"input": 10, "output": 10}  # USD per million tokens: the first turn, 0.0005
    max_cost = "0.0001"


def script(fake: FakeLLM) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(
                tool_calls=[ToolCall("add", {"a": 1, "b": 2})],
                usage=(40, 10),
            ),
        )
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="It is 3.")))


async def row(pool: Pool, loop_id: uuid.UUID) -> Loop:
    async with connection(pool) as conn:
        found = await loops.get(conn, loop_id=loop_id)
    assert found is not None
    return found


def settled(pool: Pool, loop_id: uuid.UUID, status: str):  # type: ignore[no-untyped-def]
    async def check() -> Loop | None:
        r = await row(pool, loop_id)
        return r if r.status == status else None

    return check


@pytest.fixture
async def api(
    pool: Pool, database_url: str, registry: AgentRegistry
) -> AsyncIterator[httpx.AsyncClient]:
    state = AppState.create(
        settings=fast_settings(),
        pool=pool,
        registry=registry,
        database_url=database_url,
        api_token=TOKEN,
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(state)),
        base_url="http://agentd.test",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as c:
        yield c


@pytest.mark.parametrize(
    ("agent", "reason", "raise_"),
    [
        (OneStep, "max_steps_exceeded", {"max_steps": 3}),
        (SmallBudget, "token_budget_exceeded", {"max_tokens_total": 10_000}),
        (SmallSpend, "cost_budget_exceeded", {"max_cost": "0.5"}),
    ],
)
async def test_a_loop_paused_by_its_limit_resumes_with_raised_limits(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    api: httpx.AsyncClient,
    agent: type[CalcAgent],
    reason: str,
    raise_: dict[str, object],
) -> None:
    registry.register("limited", agent)
    script(fake_llm)
    async with running_engine(pool, database_url, registry):
        r = await api.post(
            "/v1/loops",
            json={"agent": "limited", "message": "add 1+2", "state": {"llm": fake_llm.base_url}},
        )
        assert r.status_code == 201, r.text
        loop_id = uuid.UUID(r.json()["id"])
        first = await eventually(settled(pool, loop_id, "paused"))
        assert first.status_reason == reason
        # A plain resume is the dead end the limit leaves: straight back to paused.
        assert (await api.post(f"/v1/loops/{loop_id}/resume")).status_code == 200
        again = await eventually(settled(pool, loop_id, "paused"))
        assert again.status_reason == reason and len(fake_llm.requests) == 1

        r = await api.post(f"/v1/loops/{loop_id}/resume", json=raise_)
        assert r.status_code == 200, r.text
        done = await eventually(settled(pool, loop_id, "completed"))
    assert {k: done.state[k] for k in raise_} == raise_  # kept in the loop's own state
    assert done.state["llm"] == fake_llm.base_url
    assert len(fake_llm.requests) == 2


async def test_a_raise_the_loop_has_already_used_up_is_a_400_and_changes_nothing(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    api: httpx.AsyncClient,
) -> None:
    registry.register("limited", type("Both", (OneStep, SmallSpend), {}))
    script(fake_llm)
    async with running_engine(pool, database_url, registry):
        r = await api.post(
            "/v1/loops",
            json={"agent": "limited", "message": "add 1+2", "state": {"llm": fake_llm.base_url}},
        )
        loop_id = uuid.UUID(r.json()["id"])
        before = await eventually(settled(pool, loop_id, "paused"))
        for body, status, words in [
            ({"max_steps": 1}, 400, "must exceed the loop's step_count (1)"),
            ({"max_tokens_total": 1}, 400, "must exceed the tokens the loop has spent"),
            ({"max_steps": 0}, 422, "max_steps"),
            ({"max_steps": "many"}, 422, "max_steps"),
            ({"max_steps": 5, "max_tokens_total": 1}, 400, "max_tokens_total"),
            ({"max_cost": "0.0004"}, 400, "must exceed what the loop has spent (0.0005 USD)"),
            ({"max_cost": 0}, 422, "max_cost"),
            ({"max_cost": "NaN"}, 422, "max_cost"),
            ({"max_cost": "1e10"}, 422, "max_cost"),
        ]:
            r = await api.post(f"/v1/loops/{loop_id}/resume", json=body)
            assert r.status_code == status, (body, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            assert words in r.text, r.text
        after = await row(pool, loop_id)
    assert after.status == "paused" and after.state == before.state
    assert after.updated_at == before.updated_at

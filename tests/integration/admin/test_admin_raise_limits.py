"""The admin offers "resume with raised limits" on a loop its limits paused, and it works."""

from __future__ import annotations

import uuid

from admin_kit import Browser

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.store import loops
from agentd.store.models import Loop
from agentd.testing.agents import CalcAgent
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


class OneStep(CalcAgent):
    max_steps = 1


async def in_status(pool: Pool, loop_id: uuid.UUID, status: str) -> Loop | None:
    async with connection(pool) as conn:
        found = await loops.get(conn, loop_id=loop_id)
    return found if found is not None and found.status == status else None


async def test_a_loop_paused_by_max_steps_is_resumed_with_raised_limits_from_the_admin(
    operator: Browser,
    reader: Browser,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:
    registry.register("limited", OneStep)
    fake_llm.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2})]),
        )
    )
    fake_llm.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="It is 3.")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="limited", message="add", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: in_status(pool, loop.id, "paused"))
        page = (await operator.get(f"/admin/loops/{loop.id}")).text
        assert 'data-form="raise-limits"' in page and 'name="max_steps"' in page
        assert 'data-form="raise-limits"' not in (await reader.get(f"/admin/loops/{loop.id}")).text

        bad = await operator.post(f"/admin/loops/{loop.id}/actions/resume", {"max_steps": "x"})
        assert (await operator.flash(bad)).startswith("error: max_steps must be a whole number")
        r = await operator.post(f"/admin/loops/{loop.id}/actions/resume", {"max_steps": "4"})
        assert await operator.flash(r) == "ok: Resumed."
        done = await eventually(lambda: in_status(pool, loop.id, "completed"))
    assert done.state["max_steps"] == 4
    page = (await operator.get(f"/admin/loops/{loop.id}")).text
    assert 'data-form="raise-limits"' not in page  # only on a loop its limits paused


class SmallSpend(CalcAgent):
    prices = {"input": 10, "output": 10}  # USD per million tokens
    max_cost = "0.0001"  # the first turn (50 tokens) spends 0.0005


async def test_a_loop_paused_by_its_cost_budget_is_resumed_with_a_raised_one_from_the_admin(
    operator: Browser, pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    registry.register("spender", SmallSpend)
    call = Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2})], usage=(40, 10))
    fake_llm.add(Rule(match=lambda last: last.role == "user", reply=call))
    fake_llm.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="It is 3.")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="spender", message="add", state={"llm": fake_llm.base_url}
        )
        paused = await eventually(lambda: in_status(pool, loop.id, "paused"))
        assert paused.status_reason == "cost_budget_exceeded"
        page = (await operator.get(f"/admin/loops/{loop.id}")).text
        assert 'data-form="raise-limits"' in page and 'name="max_cost"' in page
        for value, words in [
            ("lots", "error: max_cost must be an amount in USD above 0"),
            ("0.0002", "error: max_cost must exceed what the loop has spent (0.0005 USD)"),
        ]:
            bad = await operator.post(f"/admin/loops/{loop.id}/actions/resume", {"max_cost": value})
            assert (await operator.flash(bad)).startswith(words)
        r = await operator.post(f"/admin/loops/{loop.id}/actions/resume", {"max_cost": "$0.25"})
        assert await operator.flash(r) == "ok: Resumed."
        done = await eventually(lambda: in_status(pool, loop.id, "completed"))
    assert done.state["max_cost"] == "0.25"

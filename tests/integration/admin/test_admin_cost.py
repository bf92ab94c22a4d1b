"""The admin shows cost: in the loop header (with its budget), per message, and per agent
on the dashboard; a loop on a model with no price shows "unknown", never $0."""

from __future__ import annotations

import pytest
from admin_kit import READ_TOKEN, Browser

from agentd.api.state import AppState
from agentd.db.pool import Pool
from agentd.settings import Settings
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.fake_llm import ToolCall as FakeCall


@pytest.fixture
def settings() -> Settings:
    return fast_settings(
        read_tokens=[READ_TOKEN], prices={"fake-model": {"input": "2", "output": "8"}}
    )


async def test_loop_header_message_and_dashboard_show_the_cost(
    operator: Browser, app_state: AppState, pool: Pool, database_url: str, fake_llm: FakeLLM
) -> None:
    fake_llm.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[FakeCall("add", {"a": 2, "b": 3})], usage=(1000, 100)),
        )
    )
    fake_llm.add(
        Rule(match=lambda last: last.role == "tool", reply=Reply(content="5", usage=(1000, 100)))
    )
    loop = await app_state.lifecycle.start(
        agent="calc",
        message="2+3?",
        state={"llm": fake_llm.base_url, "stream": True, "max_cost": "0.5"},
    )
    async with running_engine(pool, database_url, app_state.registry, settings=app_state.settings):

        async def done() -> bool:
            page = await operator.get(f"/admin/loops/{loop.id}/live")
            return "status-completed" in page.text

        await eventually(done)
    page = (await operator.get(f"/admin/loops/{loop.id}")).text
    header = page.split("data-cost>", 1)[1].split("</span>\n", 1)[0]
    assert "$0.0056" in header and "of $0.5 budget" in header
    assert page.count("data-message-cost") == 2 and "$0.0028" in page
    assert "tok/s" in page
    dashboard = (await operator.get("/admin")).text
    assert 'data-agent-cost="calc">$0.0056<' in dashboard


async def test_a_loop_without_a_price_shows_unknown_cost(
    operator: Browser, app_state: AppState, pool: Pool, database_url: str, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(reply=Reply(content="hello", usage=(10, 2))))
    app_state.settings.prices.clear()  # fake-model has no price now
    loop = await app_state.lifecycle.start(
        agent="calc", message="hi", state={"llm": fake_llm.base_url}
    )
    async with running_engine(pool, database_url, app_state.registry, settings=app_state.settings):

        async def done() -> bool:
            page = await operator.get(f"/admin/loops/{loop.id}/live")
            return "status-completed" in page.text

        await eventually(done)
    page = (await operator.get(f"/admin/loops/{loop.id}")).text
    header = page.split("data-cost>", 1)[1].split("</span>\n", 1)[0]
    assert "unknown" in header and "$" not in header
    assert "cost unknown" in page
    assert 'data-agent-cost="calc">unknown<' in (await operator.get("/admin")).text

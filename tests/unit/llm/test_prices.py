"""The price table: lookups (exact, dated snapshots, overrides) and exact cost arithmetic."""

from __future__ import annotations

import re
import tomllib
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentd.engine import loop_limits
from agentd.errors import ConfigError, CostBudgetExceeded
from agentd.llm import prices
from agentd.llm.types import LLMRequest, LLMResponse, Provider, Usage
from agentd.pipeline.llm import costs
from agentd.pipeline.llm.tokens import TurnTokens
from agentd.registry import agent_from_config
from agentd.settings import load_settings
from agentd.store.models import Loop


def loop_row(*, state: dict[str, object], cost: Decimal | None = None) -> Loop:
    now = datetime.now(UTC)
    return Loop(
        id=uuid.uuid4(), agent="a", subject=None, title=None, status="running",
        status_reason=None, state=state, execution_token=None, lease_expires_at=None,
        lease_seconds=None, worker_id=None, turn_started_at=None, step_count=1,
        error_message=None, frozen=False, observed=False, tokens_prompt=0,
        tokens_completion=0, tokens_cached=0, created_at=now, updated_at=now, cost=cost,
    )  # fmt: skip


def test_cost_prices_each_kind_of_token_at_its_own_rate() -> None:
    price = prices.Price.of({"input": "2", "cached_input": "0.5", "output": "8", "reasoning": 10})
    # 1000 prompt of which 400 cached, 300 completion of which 100 reasoning
    cost = price.cost(prompt=1000, completion=300, cached=400, reasoning=100)
    assert cost == Decimal("0.0012") + Decimal("0.0002") + Decimal("0.0016") + Decimal("0.001")
    assert isinstance(cost, Decimal)


def test_cached_and_reasoning_default_to_input_and_output() -> None:
    price = prices.Price.of({"input": 3, "output": 15})
    assert price.cost(prompt=1000, completion=1000, cached=500, reasoning=500) == Decimal("0.018")


def test_cost_is_exact_where_floats_are_not() -> None:
    price = prices.Price.of({"input": 0.1, "output": 0.2})
    total = sum((price.cost(prompt=1, completion=1) for _ in range(10)), Decimal(0))
    assert total == Decimal("0.000003")  # 10 * 3e-7, exactly
    assert prices.money(total) == "0.000003"


def test_a_dated_snapshot_takes_its_models_price_and_the_longest_name_wins() -> None:
    assert prices.lookup(["gpt-4o-2024-08-06"]) == prices.BUILTIN["gpt-4o"]
    assert prices.lookup(["gpt-4o-mini-2024-07-18"]) == prices.BUILTIN["gpt-4o-mini"]
    assert prices.lookup(["claude-sonnet-4-5-20250929"]) == prices.BUILTIN["claude-sonnet-4-5"]
    assert prices.lookup(["models/gemini-2.5-pro"]) == prices.BUILTIN["gemini-2.5-pro"]
    assert prices.lookup(["openai/GPT-4o"]) == prices.BUILTIN["gpt-4o"]


def test_a_different_model_sharing_a_prefix_is_unknown_not_mispriced() -> None:
    assert prices.lookup(["o3-pro"]) is None
    assert prices.lookup(["fake-model"]) is None
    assert prices.lookup([None, None]) is None


def test_configured_prices_win_over_the_builtin_table_and_the_agents_over_both() -> None:
    mine = prices.Price.of({"input": 1, "output": 1})
    agents = prices.Price.of({"input": 9, "output": 9})
    assert prices.lookup(["gpt-4o"], configured={"GPT-4o": mine}) == mine
    assert prices.lookup(["gpt-4o"], configured={"gpt-4o": mine}, agent_price=agents) == agents
    # the reported model is tried after the one asked for
    assert prices.lookup(["my-alias", "gpt-4o-2024-08-06"]) == prices.BUILTIN["gpt-4o"]


def test_money_is_a_plain_decimal_string() -> None:
    assert prices.money(Decimal("0.0012500000")) == "0.00125"
    assert prices.money(Decimal("100.0000000000")) == "100"
    assert prices.money(Decimal("0E-10")) == "0"
    assert prices.money(None) is None


def _turn(
    model: str, usage: Usage | None, *, ttft: float | None, duration: float
) -> costs.TurnCost:
    settings = load_settings(prices={"house-model": {"input": "1", "output": "2"}})
    agent = SimpleNamespace(prices=None, model=model)
    request = LLMRequest(provider=Provider(base_url="http://x", model=model), messages=[])
    resp = LLMResponse(usage=usage, ttft=ttft, duration=duration)
    used = TurnTokens(
        usage.prompt_tokens if usage else 10,
        usage.completion_tokens if usage else 5,
        0,
        usage is None,
    )
    return costs.of_turn(settings, agent, request, resp, used)


def test_turn_cost_speed_and_reasoning_from_the_usage() -> None:
    spent = _turn(
        "house-model",
        Usage(prompt_tokens=1000, completion_tokens=200, reasoning_tokens=50),
        ttft=0.5,
        duration=2.5,
    )
    assert spent.cost == Decimal("0.0014")
    assert spent.tokens_reasoning == 50
    assert spent.generation_seconds == pytest.approx(2.0)
    assert spent.tps == pytest.approx(100.0)
    assert spent.usage_metadata()["cost"] == "0.0014"


def test_an_unknown_model_has_no_cost_and_a_non_streamed_turn_counts_its_whole_duration() -> None:
    spent = _turn("mystery", Usage(prompt_tokens=10, completion_tokens=40), ttft=None, duration=2.0)
    assert spent.cost is None and spent.usage_metadata()["cost"] is None
    assert spent.tps == pytest.approx(20.0)


def test_a_bad_agent_price_is_a_config_error_naming_the_shape() -> None:
    agent = SimpleNamespace(prices={"input": 1}, model="m", name="x")
    with pytest.raises(ConfigError, match="prices must give input and output"):
        costs.price_for(load_settings(), agent, None, LLMResponse())


def test_budget_from_state_wins_and_pauses_once_spent() -> None:
    agent = SimpleNamespace(max_cost=10)
    loop = loop_row(state={"max_cost": "0.5"}, cost=Decimal("0.4"))
    assert loop_limits.cost_budget(agent, loop) == Decimal("0.5")
    loop_limits.check_cost_budget(agent, loop)  # not spent yet
    with pytest.raises(CostBudgetExceeded, match=r"max_cost 0.5 USD\) reached: 0.5 USD spent"):
        loop_limits.check_cost_budget(
            agent, loop_row(state={"max_cost": "0.5"}, cost=Decimal("0.5"))
        )
    # no price known: nothing is spent, nothing pauses
    loop_limits.check_cost_budget(agent, loop_row(state={"max_cost": "0.5"}, cost=None))
    assert (
        loop_limits.cost_budget(SimpleNamespace(max_cost=None), loop_row(state={"max_cost": "x"}))
        is None
    )


DOC = Path(__file__).parents[3] / "docs" / "configuration.md"


def test_the_documented_price_table_is_the_builtin_one() -> None:
    text = DOC.read_text()
    assert f"indicative list prices as of {prices.PRICES_AS_OF}" in text
    for name, p in prices.BUILTIN.items():
        row = f"| `{name}` | {prices.money(p.input)} | {prices.money(p.cached_input)} | "
        assert row + f"{prices.money(p.output)} |" in text, name


def test_the_documented_price_configuration_loads() -> None:
    block = re.search(r"```toml\n(\[prices\..*?)```", DOC.read_text(), re.S)
    assert block is not None
    data = tomllib.loads(block.group(1))
    settings = load_settings(prices=data["prices"])
    assert settings.prices["gpt-4o"].input == Decimal("2.50")
    agent = agent_from_config("support", data["agents"]["support"])
    assert loop_limits.cost_budget(agent, loop_row(state={})) == Decimal(5)
    spent = costs.price_for(settings, agent, None, LLMResponse())
    assert spent == prices.Price(input=Decimal(3), output=Decimal(12))
    configured = {
        k: prices.Price.of(v.model_dump(exclude_none=True)) for k, v in settings.prices.items()
    }
    assert prices.lookup(["llama-3.3-70b"], configured=configured) == prices.Price(
        input=Decimal("0.59"), output=Decimal("0.79")
    )

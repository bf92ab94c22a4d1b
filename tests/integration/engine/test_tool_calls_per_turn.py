"""A model answer asking for more tool calls than allowed fails the loop with a clear
message and runs none of them (issue 42): AGENTD_MAX_TOOL_CALLS_PER_TURN, or the agent's
max_tool_calls_per_turn (class attribute or TOML key)."""

from __future__ import annotations

import uuid

import pytest

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry, agent_from_config
from agentd.store import loops, messages
from agentd.store.models import Loop
from agentd.testing.agents import CALLS, CalcAgent
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


class TwoCallsAgent(CalcAgent):
    max_tool_calls_per_turn = 2


async def _settled(pool: Pool, loop_id: uuid.UUID) -> Loop | None:
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop_id)
    assert row is not None
    return row if row.status in ("failed", "completed", "paused") else None


def _adds(n: int) -> list[ToolCall]:
    return [ToolCall("add", {"a": i, "b": 1}) for i in range(n)]


@pytest.mark.parametrize("streaming", [False, True])
async def test_an_answer_over_the_setting_fails_the_loop_and_runs_nothing(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM, streaming: bool
) -> None:
    fake_llm.add(Rule(match=lambda last: last.text == "go", reply=Reply(tool_calls=_adds(500))))
    fake_llm.add(Rule(reply=Reply(content="sorry, done")))
    settings = fast_settings(max_tool_calls_per_turn=128)
    async with running_engine(pool, database_url, registry, settings=settings) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="go", state={"llm": fake_llm.base_url, "stream": streaming}
        )
        row = await eventually(lambda: _settled(pool, loop.id))
        failed = row
        # Continued with a message, the loop asks the model again and goes on.
        await engine.lifecycle.append_message(loop.id, "try again, fewer calls")

        async def completed() -> Loop | None:
            done = await _settled(pool, loop.id)
            return done if done is not None and done.status == "completed" else None

        await eventually(completed)
    row = failed
    assert row.status == "failed" and row.status_reason == "turn_failed"
    assert row.error_message == (
        "the model asked for 500 tool calls in one answer; the limit is 128 "
        "(max_tool_calls_per_turn): none was run"
    )
    assert CALLS == [] and len(fake_llm.requests) == 2
    async with connection(pool) as conn:
        assert await conn.fetchval("SELECT count(*) FROM tool_calls") == 0
        rows = await messages.list_(conn, loop_id=loop.id)
    # The refused answer is not in the transcript: the continued loop's prompt is clean.
    assert [m.role for m in rows] == ["user", "user", "assistant"]


async def test_the_agents_own_limit_wins_and_a_toml_key_sets_it(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    registry.register("two", TwoCallsAgent)
    toml = agent_from_config(
        "toml_two", {"class": "agentd.testing.agents:CalcAgent", "max_tool_calls_per_turn": 2}
    )
    assert toml.max_tool_calls_per_turn == 2
    registry.register("toml_two", toml)
    fake_llm.reply(tool_calls=_adds(3))
    async with running_engine(pool, database_url, registry) as engine:
        for agent in ("two", "toml_two"):
            loop = await engine.lifecycle.start(
                agent=agent, message="go", state={"llm": fake_llm.base_url}
            )
            row = await eventually(lambda lid=loop.id: _settled(pool, lid))  # type: ignore[misc]
            assert row.status == "failed"
            assert row.error_message is not None and "the limit is 2" in row.error_message
    assert CALLS == []


async def test_an_answer_at_the_limit_runs_every_call(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    registry.register("two", TwoCallsAgent)
    fake_llm.add(Rule(match=lambda last: last.role == "user", reply=Reply(tool_calls=_adds(2))))
    fake_llm.add(Rule(reply=Reply(content="done")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="two", message="go", state={"llm": fake_llm.base_url}
        )
        row = await eventually(lambda: _settled(pool, loop.id))
    assert row.status == "completed"
    assert len(CALLS) == 2

"""Token accounting per message and per loop (usage, or a flagged estimate), in the API, and
the per-loop budget that pauses a loop before it calls the model again."""

from __future__ import annotations

import uuid

import httpx
from long_loops_kit import in_status, loop_row

from agentd.db.pool import Pool
from agentd.registry import AgentRegistry
from agentd.testing.agents import CALLS
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


def add_then_answer(fake: FakeLLM, *, usage: tuple[int, int] | None) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2})], usage=usage),
        )
    )
    fake.add(
        Rule(
            match=lambda last: last.role == "tool",
            reply=Reply(content="the sum is 3", usage=usage),
        )
    )


async def test_budget_pauses_the_loop_before_the_next_model_call(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    add_then_answer(fake_llm, usage=(80, 30))  # 110 tokens spent by the first turn
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="budget", message="go", state={"llm": fake_llm.base_url}
        )
        row = await eventually(in_status(pool, loop.id, "paused"))
    assert row.status_reason == "token_budget_exceeded"
    assert row.error_message == ("token budget (max_tokens_total 100) reached: 110 tokens spent")
    assert row.step_count == 1 and row.execution_token is None
    assert len(fake_llm.requests) == 1 and len(CALLS) == 1  # the tool ran; no second call


async def test_start_request_budget_overrides_the_agents(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    client: httpx.AsyncClient,
) -> None:
    add_then_answer(fake_llm, usage=(80, 30))
    r = await client.post(
        "/v1/loops",
        json={
            "agent": "calc",  # no budget of its own
            "message": "go",
            "state": {"llm": fake_llm.base_url},
            "max_tokens_total": 50,
        },
    )
    assert r.status_code == 201, r.text
    loop_id = uuid.UUID(r.json()["id"])
    assert r.json()["state"]["max_tokens_total"] == 50
    async with running_engine(pool, database_url, registry):
        row = await eventually(in_status(pool, loop_id, "paused"))
    assert row.status_reason == "token_budget_exceeded"
    shown = (await client.get(f"/v1/loops/{loop_id}")).json()
    assert shown["status_reason"] == "token_budget_exceeded"
    assert shown["tokens"] == {
        "prompt": 80,
        "completion": 30,
        "cached": 0,
        "reasoning": 0,
        "estimated": False,
    }


async def test_per_message_tokens_are_in_the_transcript(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    client: httpx.AsyncClient,
) -> None:
    add_then_answer(fake_llm, usage=(40, 7))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="go", state={"llm": fake_llm.base_url}
        )
        await eventually(in_status(pool, loop.id, "completed"))
    items = (await client.get(f"/v1/loops/{loop.id}/messages")).json()["items"]
    assert [(m["role"], m["tokens"]) for m in items] == [
        ("user", None),
        (
            "assistant",
            {"prompt": 40, "completion": 7, "cached": 0, "reasoning": 0, "estimated": False},
        ),
        ("tool", None),
        (
            "assistant",
            {"prompt": 40, "completion": 7, "cached": 0, "reasoning": 0, "estimated": False},
        ),
    ]
    assert all(m["superseded"] is False and m["summary_through"] is None for m in items)
    shown = (await client.get(f"/v1/loops/{loop.id}")).json()
    assert shown["tokens"] == {
        "prompt": 80,
        "completion": 14,
        "cached": 0,
        "reasoning": 0,
        "estimated": False,
    }


async def test_missing_usage_is_estimated_and_flagged(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    client: httpx.AsyncClient,
) -> None:
    fake_llm.add(Rule(reply=Reply(content="x" * 40, usage=(0, 0))))  # no usage reported
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="hello", state={"llm": fake_llm.base_url}
        )
        await eventually(in_status(pool, loop.id, "completed"))
    row = await loop_row(pool, loop.id)
    assert row.tokens_estimated and row.tokens_completion == 10 and row.tokens_prompt > 0
    items = (await client.get(f"/v1/loops/{loop.id}/messages")).json()["items"]
    answer = items[-1]["tokens"]
    assert answer["estimated"] is True and answer["completion"] == 10
    assert (await client.get(f"/v1/loops/{loop.id}")).json()["tokens"]["estimated"] is True

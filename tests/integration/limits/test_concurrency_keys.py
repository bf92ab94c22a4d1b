"""Concurrency keys: never more loops running under a key than its limit, even with racing
workers; the rest wait queued in start order, and other keys' loops never wait for them."""

from __future__ import annotations

import uuid
from collections import defaultdict

from limits_kit import all_completed, first_user_text, peak_overlap, rows, two_engines

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.store import concurrency_keys, jobs
from agentd.testing.agents import CalcAgent
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, RecordedRequest, Reply, Rule, ToolCall


class KeyedAgent(CalcAgent):
    concurrency_key = "shared"
    concurrency_limit = 2


def by_loop(requests: list[RecordedRequest]) -> dict[str, tuple[float, float]]:
    """Each loop's span at the provider: its first request's arrival to its last's end."""
    spans: dict[str, list[float]] = defaultdict(list)
    for r in requests:
        assert r.done_at is not None
        spans[first_user_text(r)] += [r.at, r.done_at]
    return {k: (min(v), max(v)) for k, v in spans.items()}


def tool_then_answer(fake: FakeLLM, delay: float) -> None:
    # Two turns and a tool call per loop: the slot is held across the tool phase and the
    # queued gap between turns, not only while a turn runs.
    fake.add(
        Rule(
            match=lambda m: m.role == "user",
            reply=Reply(
                tool_calls=[ToolCall("add", {"a": 1, "b": 2})], delay_before_first_byte=delay
            ),
        )
    )
    fake.add(
        Rule(
            match=lambda m: m.role == "tool",
            reply=Reply(content="3", delay_before_first_byte=delay),
        )
    )


async def test_a_key_never_runs_more_loops_than_its_limit_under_racing_workers(
    pool: Pool, second_pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    registry.register("keyed", KeyedAgent)
    tool_then_answer(fake_llm, delay=0.05)
    async with two_engines(pool, second_pool, database_url, registry) as (one, two):
        ids = [
            (
                await (one if i % 2 else two).lifecycle.start(
                    agent="keyed", message=f"loop {i}", state={"llm": fake_llm.base_url}
                )
            ).id
            for i in range(8)
        ]
        await eventually(lambda: all_completed(pool, ids), within=30)
    spans = by_loop(fake_llm.requests)
    assert len(spans) == 8 and len(fake_llm.requests) == 16
    assert peak_overlap(list(spans.values())) == KeyedAgent.concurrency_limit
    async with connection(pool) as conn:
        assert await concurrency_keys.list_(conn) == []  # every slot was given back
    assert not [r for r in await rows(pool, ids) if r.concurrency_held]


async def test_waiting_loops_run_in_start_order_and_never_hold_up_other_keys(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.reply(content="done", delay_before_first_byte=0.3)
    async with running_engine(pool, database_url, registry) as engine:

        async def start(message: str, key: str) -> uuid.UUID:
            loop = await engine.lifecycle.start(
                agent="calc",
                message=message,
                state={"llm": fake_llm.base_url},
                concurrency_key=key,
                concurrency_limit=1,
            )
            return loop.id

        ids = [await start(f"a{i}", "customer-a") for i in range(3)]
        ids.append(await start("b0", "customer-b"))
        await eventually(lambda: all_completed(pool, ids))
    order = [first_user_text(r) for r in fake_llm.requests]
    assert order.index("b0") < order.index("a1")  # b's key was free: it did not queue behind a
    assert [x for x in order if x.startswith("a")] == ["a0", "a1", "a2"]
    spans = by_loop(fake_llm.requests)
    assert peak_overlap([spans[f"a{i}"] for i in range(3)]) == 1


async def test_a_paused_loop_gives_its_slot_to_the_next_one(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(match="first", reply=Reply(tool_calls=[ToolCall("refund", {"amount": 5})])))
    fake_llm.reply(content="done")
    async with running_engine(pool, database_url, registry) as engine:
        kw = {"concurrency_key": "k", "concurrency_limit": 1}
        first = await engine.lifecycle.start(
            agent="calc", message="first", state={"llm": fake_llm.base_url}, **kw
        )
        # Parked on an approval: still running under its key.
        await eventually(lambda: _status(pool, first.id, "waiting"))
        second = await engine.lifecycle.start(
            agent="calc", message="second", state={"llm": fake_llm.base_url}, **kw
        )
        # A claim now finds nothing: the only ready job belongs to a saturated key.
        async with connection(pool) as conn:
            claim = await jobs.claim_llm(
                conn, execution_token=uuid.uuid4(), worker_id=uuid.uuid4(), default_lease=5.0
            )
        assert claim is None
        assert (await rows(pool, [second.id]))[0].status == "queued"
        await engine.lifecycle.pause(first.id)
        await eventually(lambda: all_completed(pool, [second.id]))
    [row] = await rows(pool, [first.id])
    assert row.status == "paused" and not row.concurrency_held


async def _status(pool: Pool, loop_id, status: str) -> bool:  # type: ignore[no-untyped-def]
    [row] = await rows(pool, [loop_id])
    return row.status == status

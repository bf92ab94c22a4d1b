"""A 429/503 with Retry-After holds every worker's turns on that provider key until then."""

from __future__ import annotations

from limits_kit import all_completed, two_engines

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.store import events, providers
from agentd.testing.engine import eventually
from agentd.testing.fake_llm import FakeLLM, Reply, Rule

RETRY_AFTER = 1.5


async def blocked(pool: Pool) -> list[dict]:  # type: ignore[type-arg]
    async with connection(pool) as conn:
        return [p for p in await providers.list_(conn, window_seconds=60) if p["blocked_seconds"]]


async def test_retry_after_holds_every_workers_turns_on_the_key_until_the_deadline(
    pool: Pool, second_pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(reply=Reply(status=429, retry_after=RETRY_AFTER), times=1))
    fake_llm.reply(content="done")
    async with two_engines(pool, second_pool, database_url, registry) as (one, two):
        first = await one.lifecycle.start(
            agent="calc", message="first", state={"llm": fake_llm.base_url}
        )
        [row] = await eventually(lambda: blocked(pool))
        # Started after the back-off was recorded, on both workers.
        rest = [
            await engine.lifecycle.start(
                agent="calc", message=f"loop {i}", state={"llm": fake_llm.base_url}
            )
            for i, engine in enumerate([one, two, one, two])
        ]
        ids = [first.id, *(r.id for r in rest)]
        done = await eventually(lambda: all_completed(pool, ids), within=15)

    throttled, *later = fake_llm.requests
    assert len(later) == len(ids)  # the throttled turn was not re-sent in-process
    # The deadline is counted from when the 429 was recorded, after it arrived.
    assert all(r.at >= throttled.at + RETRY_AFTER for r in later), [
        round(r.at - throttled.at, 3) for r in later
    ]
    assert row["last_status"] == 429 and row["throttled"] == 1
    assert row["key_fingerprint"] == "none" and row["model"] == "fake-model"
    assert {r.status for r in done} == {"completed"}
    async with connection(pool) as conn:
        evs = await events.list_(conn, loop_id=first.id, limit=100)
    deferred = [e for e in evs if e.name == "turn.deferred"]
    assert deferred and deferred[0].reason == "provider_backoff"
    assert [e.status for e in evs if e.name == "llm.request"] == [429, 200]


async def test_a_provider_that_never_throttled_is_not_slowed(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    from agentd.testing.engine import running_engine

    fake_llm.reply(content="done")
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="hi", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: all_completed(pool, [loop.id]))
    assert await blocked(pool) == []
    async with connection(pool) as conn:
        assert await providers.list_(conn, window_seconds=60) == []  # no write per turn

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentd.db.pool import Pool, connection, transaction
from agentd.engine.lifecycle import Lifecycle
from agentd.engine.scheduler import Scheduler, next_tick, parse_spec, upcoming
from agentd.errors import ConfigError
from agentd.registry import AgentRegistry
from agentd.store import loops, schedules
from agentd.testing import agents
from agentd.testing.engine import fast_settings, running_engine


@pytest.fixture
def registry() -> AgentRegistry:
    return agents.registry()


async def _schedule(
    pool: Pool,
    *,
    name: str = "nightly",
    cron: str | None = "0 3 * * *",
    due: bool = True,
    overlap: str = "skip",
    **kw: Any,
) -> None:
    past = datetime.now(UTC) - timedelta(seconds=5)
    async with transaction(pool) as conn:
        await schedules.upsert(
            conn,
            name=name,
            agent=kw.get("agent", "calc"),
            message="report",
            subject=None,
            state={"llm": "http://127.0.0.1:9"},
            cron=cron,
            timezone="UTC",
            next_run_at=past if due else datetime.now(UTC) + timedelta(hours=1),
            overlap=overlap,
            source="api",
        )


async def _make_due(pool: Pool, name: str) -> None:
    async with transaction(pool) as conn:
        await conn.execute(
            "UPDATE schedules SET next_run_at = now() - interval '1 second' WHERE name = $1", name
        )


async def _loops_of(pool: Pool, name: str) -> list[Any]:
    async with connection(pool) as conn:
        s = await schedules.get(conn, name=name)
        assert s is not None
        rows = await conn.fetch("SELECT id, status FROM loops WHERE schedule_id = $1", s.id)
    return list(rows)


async def test_three_schedulers_racing_fire_a_tick_exactly_once(
    pool: Pool, registry: AgentRegistry
) -> None:
    await _schedule(pool)
    settings = fast_settings()
    racers = [Scheduler(settings, pool, Lifecycle(pool, registry, settings)) for _ in range(3)]
    reports = await asyncio.gather(*(r.tick_once() for r in racers))
    assert sum(r.started for r in reports) == 1
    assert len(await _loops_of(pool, "nightly")) == 1
    async with connection(pool) as conn:
        s = await schedules.get(conn, name="nightly")
    assert s is not None and s.runs == 1 and s.next_run_at is not None
    assert s.next_run_at > datetime.now(UTC) and s.next_run_at.hour == 3
    again = await asyncio.gather(*(r.tick_once() for r in racers))
    assert sum(r.started for r in again) == 0


async def test_cron_schedule_fires_once_per_tick_with_three_engines_running(
    pool: Pool, database_url: str, registry: AgentRegistry
) -> None:
    async with (
        running_engine(pool, database_url, registry, queues=["maintenance"]) as a,
        running_engine(pool, database_url, registry, queues=["maintenance"]) as b,
        running_engine(pool, database_url, registry, queues=["maintenance"]) as c,
    ):
        await _schedule(pool)
        for engine in (a, b, c):
            n = engine.scheduler.ticked.count
            await engine.scheduler.ticked.wait_for(n + 3, within=15)
    assert len(await _loops_of(pool, "nightly")) == 1


@pytest.mark.parametrize(
    ("overlap", "loops_after_two_ticks", "pending"),
    [("skip", 1, 0), ("allow", 2, 0), ("queue", 1, 1)],
)
async def test_overlap_policies(
    pool: Pool, registry: AgentRegistry, overlap: str, loops_after_two_ticks: int, pending: int
) -> None:
    settings = fast_settings()
    sched = Scheduler(settings, pool, Lifecycle(pool, registry, settings))
    await _schedule(pool, overlap=overlap)
    await sched.tick_once()
    await _make_due(pool, "nightly")  # the next tick arrives while run 1 is still queued
    await sched.tick_once()
    rows = await _loops_of(pool, "nightly")
    assert len(rows) == loops_after_two_ticks
    async with connection(pool) as conn:
        s = await schedules.get(conn, name="nightly")
    assert s is not None and s.pending_runs == pending
    if overlap == "queue":
        async with transaction(pool) as conn:  # the first run finishes...
            await conn.execute("UPDATE loops SET status = 'completed' WHERE schedule_id = $1", s.id)
        report = await sched.tick_once()  # ...and the queued run starts, in order
        assert report.started == 1 and len(await _loops_of(pool, "nightly")) == 2


async def test_one_shot_fires_once_and_unknown_agents_do_not_block_others(
    pool: Pool, registry: AgentRegistry
) -> None:
    settings = fast_settings()
    sched = Scheduler(settings, pool, Lifecycle(pool, registry, settings))
    await _schedule(pool, name="once", cron=None)
    await _schedule(pool, name="ghost", agent="no-such-agent")
    report = await sched.tick_once()
    assert (report.started, report.failed) == (1, 1)
    async with connection(pool) as conn:
        once = await schedules.get(conn, name="once")
        ghost = await schedules.get(conn, name="ghost")
    assert once is not None and once.next_run_at is None and upcoming(once) == []
    assert ghost is not None and ghost.skipped_runs == 1 and ghost.next_run_at is not None
    assert (await sched.tick_once()).started == 0


async def test_config_schedules_sync_and_validate(pool: Pool, registry: AgentRegistry) -> None:
    settings = fast_settings()
    sched = Scheduler(settings, pool, Lifecycle(pool, registry, settings))
    await sched.sync_config(
        {
            "hourly": {
                "agent": "calc",
                "message": "m",
                "cron": "0 * * * *",
                "timezone": "Europe/Berlin",
                "overlap": "queue",
            }
        }
    )
    async with connection(pool) as conn:
        s = await schedules.get(conn, name="hourly")
        assert s is not None and s.source == "config" and s.overlap == "queue"
        assert [t.minute for t in upcoming(s, 3)] == [0, 0, 0]
        first = s.next_run_at
    await sched.sync_config(
        {
            "hourly": {
                "agent": "calc",
                "message": "m",
                "cron": "0 * * * *",
                "timezone": "Europe/Berlin",
                "overlap": "queue",
            }
        }
    )
    async with connection(pool) as conn:
        s2 = await schedules.get(conn, name="hourly")
    assert s2 is not None and s2.next_run_at == first  # a restart keeps the pending tick
    with pytest.raises(ConfigError, match="cron"):
        parse_spec("bad", {"agent": "calc", "message": "m", "cron": "every day"})
    with pytest.raises(ConfigError, match="unknown key 'crn'"):
        parse_spec("bad", {"agent": "calc", "message": "m", "crn": "* * * * *"})
    with pytest.raises(ConfigError, match="timezone"):
        parse_spec(
            "bad",
            {"agent": "calc", "message": "m", "cron": "* * * * *", "timezone": "Mars/Olympus"},
        )


def test_next_tick_honours_the_time_zone() -> None:
    after = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    t = next_tick("0 9 * * *", "Europe/Berlin", after)
    assert t == datetime(2026, 7, 2, 7, 0, tzinfo=UTC)  # 09:00 CEST
    _ = loops  # the store module is exercised through the scheduler

"""Fleet-wide behaviour with real `agentd worker` processes: one worker's 429 holds every
worker's turns on that provider key, and a schedule's tick fires once with three workers."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentd.db.pool import Pool, connection, transaction
from agentd.engine.lifecycle import Lifecycle
from agentd.engine.scheduler import next_tick
from agentd.store import schedules
from agentd.testing import agents
from agentd.testing.fake_llm import FakeLLM, Reply, Rule

from ._procs import fleet, lifecycle_settings, poll

pytestmark = [pytest.mark.acceptance]

RETRY_AFTER = 2.0


async def _statuses(pool: Pool, ids: list[uuid.UUID]) -> list[str]:
    async with connection(pool) as conn:
        rows = await conn.fetch("SELECT status FROM loops WHERE id = ANY($1::uuid[])", ids)
    return [r["status"] for r in rows]


async def test_a_429_on_one_worker_holds_both_workers_until_the_deadline(
    pool: Pool, database_url: str, tmp_path: Path
) -> None:
    lifecycle = Lifecycle(pool, agents.registry(), lifecycle_settings())
    async with FakeLLM() as fake, fleet(tmp_path, database_url) as f:
        fake.add(Rule(reply=Reply(status=429, retry_after=RETRY_AFTER), times=1))
        fake.add(Rule(reply=Reply(content="done")))
        await f.worker("worker-a", pool)
        await f.worker("worker-b", pool)
        first = await lifecycle.start(agent="calc", message="first", state={"llm": fake.base_url})

        async def throttled() -> bool:
            async with connection(pool) as conn:
                n = await conn.fetchval(
                    "SELECT count(*) FROM provider_state WHERE blocked_until > now()"
                )
            return bool(n)

        await poll(throttled, within=15, what="the back-off recorded")
        rest = [
            await lifecycle.start(agent="calc", message=f"loop {i}", state={"llm": fake.base_url})
            for i in range(6)
        ]
        ids = [first.id, *(r.id for r in rest)]

        async def all_done() -> bool:
            return set(await _statuses(pool, ids)) == {"completed"}

        await poll(all_done, within=30, what="every loop completed")
    first_429, *later = fake.requests
    assert len(later) == len(ids)  # nothing re-sent in-process, by either worker
    early = [round(r.at - first_429.at, 3) for r in later if r.at < first_429.at + RETRY_AFTER]
    assert early == [], f"requests before the Retry-After deadline: {early}"


async def test_a_schedule_tick_fires_once_with_three_worker_processes(
    pool: Pool, database_url: str, tmp_path: Path
) -> None:
    async with fleet(tmp_path, database_url) as f:
        for name in ("worker-a", "worker-b", "worker-c"):
            await f.worker(name, pool, AGENTD_SCHEDULER_INTERVAL="0.1")
        async with transaction(pool) as conn:
            await schedules.upsert(
                conn,
                name="every-minute",
                agent="calc",
                message="tick",
                subject=None,
                state={"llm": "http://127.0.0.1:9"},
                cron="* * * * *",
                timezone="UTC",
                next_run_at=datetime.now(UTC) - timedelta(seconds=1),
                overlap="allow",
                source="api",
            )

        async def fired() -> int:
            async with connection(pool) as conn:
                s = await schedules.get(conn, name="every-minute")
            return s.runs if s is not None else 0

        await poll(fired, within=15, what="the schedule fired")
        async with connection(pool) as conn:
            first = await schedules.get(conn, name="every-minute")
        assert first is not None and first.next_run_at is not None
        after_first = first.next_run_at  # the tick after the one that fired

        async def extra_runs() -> int:
            """Runs beyond one per tick the schedule has moved past (by tick identity: the
            window may cross a minute boundary, whose tick then rightly fires once too)."""
            async with connection(pool) as conn:
                s = await schedules.get(conn, name="every-minute")
            assert s is not None and s.next_run_at is not None
            passed, t = 1, after_first
            while t < s.next_run_at:
                passed, t = passed + 1, next_tick("* * * * *", "UTC", t)
            return s.runs - passed

        # Three schedulers tick every 0.1 s: in 2 s (about 60 of their ticks) no tick fires
        # twice.
        with pytest.raises(AssertionError, match="a tick fired twice"):
            await poll(extra_runs, within=2.0, what="a tick fired twice", interval=0.05)
        assert await extra_runs() == 0
        async with connection(pool) as conn:
            s = await schedules.get(conn, name="every-minute")
            n = await conn.fetchval(
                "SELECT count(*) FROM loops WHERE schedule_id = $1", s.id if s else 0
            )
        assert s is not None and n == s.runs  # one loop per run
        assert s.next_run_at is not None and s.next_run_at > datetime.now(UTC)

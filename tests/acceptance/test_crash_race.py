"""Two workers (each with its own reaper) plus `agentd reap` in a loop, racing on the same
rows over many loops with parallel tool calls; one worker is killed -9 mid-run and a third
takes its place. Every loop completes with exactly one record per turn and per call."""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path
from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.testing import agents
from agentd.testing.agents import invocations
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

from ._procs import Fleet, assert_exactly_once, fleet, lifecycle_settings, poll

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(180)]

LOOPS = 30
TURN_DELAY = 0.3  # every model answer takes this long, so turns are in flight at the kill


async def reap_forever(f: Fleet, stop: asyncio.Event) -> list[int]:
    """`agentd reap`, again and again, until told to stop: a third reaper in the race."""
    codes = []
    n = 0
    while not stop.is_set():
        n += 1
        p = await f.start(f"reap-{n}", "reap")
        codes.append(await p.exited(60))
    return codes


async def count(pool: Pool, sql: str, *args: Any) -> int:
    async with connection(pool) as conn:
        return int(await conn.fetchval(sql, *args))


async def test_two_workers_and_reapers_racing_through_a_kill_keep_records_exactly_once(
    pool: Pool, database_url: str, tmp_path: Path
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    slow = {"delay_before_first_byte": TURN_DELAY}
    async with FakeLLM() as fake, fleet(tmp_path, database_url) as f:
        fake.add(
            Rule(
                match=lambda last: last.role == "user",
                reply=Reply(
                    tool_calls=[
                        ToolCall("slow_add", {"a": 1, "b": 2}),
                        ToolCall("slow_add", {"a": 3, "b": 4}),
                        ToolCall("add", {"a": 5, "b": 6}),
                    ],
                    **slow,  # type: ignore[arg-type]
                ),
            )
        )
        fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="done", **slow)))  # type: ignore[arg-type]
        limits = {"AGENTD_LLM_CONCURRENCY": "4", "AGENTD_TOOL_CONCURRENCY": "4"}
        a = await f.worker("worker-a", pool, **limits)
        b = await f.worker("worker-b", pool, **limits)
        stop_reaping = asyncio.Event()
        reaping = asyncio.create_task(reap_forever(f, stop_reaping))

        lifecycle = Lifecycle(pool, agents.registry(), lifecycle_settings())
        started = await asyncio.gather(
            *(
                lifecycle.start(
                    agent="probe",
                    message=f"loop {i}",
                    state={"llm": fake.base_url, "probe_dir": str(probe)},
                )
                for i in range(LOOPS)
            )
        )
        ids = [loop.id for loop in started]

        async def a_is_busy_midway() -> bool:
            done = await count(pool, "SELECT count(*) FROM loops WHERE status = 'completed'")
            held = await count(pool, "SELECT count(*) FROM loops WHERE worker_id = $1", a.worker_id)
            return done >= 5 and held > 0

        await poll(a_is_busy_midway, within=30, what="worker-a holding turns mid-run")
        a.kill9()
        killed = time.monotonic()
        held_by_a = await count(
            pool, "SELECT count(*) FROM loops WHERE worker_id = $1", a.worker_id
        )

        async def none_held_by_a() -> bool:
            return (
                await count(
                    pool,
                    "SELECT count(*) FROM loops WHERE worker_id = $1 OR id IN "
                    "(SELECT loop_id FROM tool_calls WHERE lease_worker_id = $1)",
                    a.worker_id,
                )
                == 0
            )

        await poll(none_held_by_a, within=10, what="worker-a's leases reclaimed")
        reclaimed_in = time.monotonic() - killed
        c = await f.worker("worker-c", pool, **limits)

        async def all_done() -> bool:
            return (
                await count(
                    pool,
                    "SELECT count(*) FROM loops WHERE id = ANY($1::uuid[]) "
                    "AND status = 'completed'",
                    ids,
                )
                == LOOPS
            )

        await poll(all_done, within=90, what="every loop completed", interval=0.1)
        stop_reaping.set()
        reap_codes = await reaping
        assert await a.exited(5) == -9
        assert b.returncode is None and c.returncode is None
        print(
            f"\nRECOVERY race: {held_by_a} turn(s) of the killed worker reclaimed in "
            f"{reclaimed_in:.3f}s; {len(reap_codes)} `agentd reap` run(s)"
        )

    assert reap_codes and set(reap_codes) == {0}
    await assert_exactly_once(pool, ids)
    async with connection(pool) as conn:
        calls = await conn.fetch(
            "SELECT id, name FROM tool_calls WHERE loop_id = ANY($1::uuid[])", ids
        )
        dead_rows = await conn.fetchval("SELECT count(*) FROM workers WHERE id = $1", a.worker_id)
    assert len(calls) == 3 * LOOPS and dead_rows == 0
    # Every probe call ran; a call ran twice only if the killed worker was running it.
    runs: dict[str, list[int]] = collections.defaultdict(list)
    for entry in invocations(probe):
        runs[entry["key"]].append(entry["pid"])
    want = {f"agentd:tool_call:{c['id']}" for c in calls if c["name"] == "slow_add"}
    assert set(runs) == want
    for key, pids in runs.items():
        assert len(pids) == 1 or (len(pids) == 2 and pids[0] == a.pid), (key, pids)

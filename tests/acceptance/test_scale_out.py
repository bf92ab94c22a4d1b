"""Scale out: three `agentd worker` processes and one `agentd api` on one database.

Mid-run one worker is SIGKILLed and another SIGTERMed; a replacement starts. Every loop
must complete with exactly one record per turn and per tool call, and the SIGTERMed
worker's in-flight turns must be resumed by the others at once (handed back on shutdown),
not after their 122 s lease expires.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.settings import Settings
from agentd.testing import agents
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

from ._procs_scale import (
    all_completed,
    assert_exactly_once,
    fleet,
    free_port,
    http_ok,
    live_workers,
    poll,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.slow, pytest.mark.timeout(240)]

LOOPS = 40
READ_TIMEOUT = 120.0  # lease = read timeout + margin = 122 s: far longer than the test
TURN_DELAY = 1.5  # every model answer takes this long, so turns are in flight at the kill
GRACE = 0.3  # the SIGTERMed worker's shutdown grace: far shorter than a turn


def script(fake: FakeLLM) -> None:
    """Three steps per loop, two parallel tool calls in each of the first two."""

    def after(*values: str):  # type: ignore[no-untyped-def]
        # Parallel results land in completion order: either one may be the last message.
        return lambda last: last.role == "tool" and last.text in values

    fake.add(
        Rule(
            match=after("30", "70"), reply=Reply(content="done", delay_before_first_byte=TURN_DELAY)
        )
    )
    fake.add(
        Rule(
            match=after("3", "7"),
            reply=Reply(
                tool_calls=[
                    ToolCall("add", {"a": 10, "b": 20}),
                    ToolCall("add", {"a": 30, "b": 40}),
                ],
                delay_before_first_byte=TURN_DELAY,
            ),
        )
    )
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(
                tool_calls=[ToolCall("add", {"a": 1, "b": 2}), ToolCall("add", {"a": 3, "b": 4})],
                delay_before_first_byte=TURN_DELAY,
            ),
        )
    )


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as fake:
        script(fake)
        yield fake


async def _held_by(pool: Pool, worker_id: uuid.UUID, *, started_within: float = 1e9) -> set:  # type: ignore[type-arg]
    """Loops whose current turn `worker_id` holds, claimed at most `started_within` s ago."""
    async with connection(pool) as conn:
        rows = await conn.fetch(
            "SELECT id FROM loops WHERE status = 'running' AND worker_id = $1 "
            "AND turn_started_at > now() - make_interval(secs => $2)",
            worker_id,
            started_within,
        )
    return {r["id"] for r in rows}


async def test_workers_killed_and_terminated_mid_run_lose_nothing(
    tmp_path: Path, database_url: str, pool: Pool, fake_llm: FakeLLM
) -> None:
    port = free_port()
    env = {
        "AGENTD_DEFAULT_READ_TIMEOUT": str(READ_TIMEOUT),
        "AGENTD_LLM_CONCURRENCY": "5",  # 40 loops cannot all land on one worker
        "AGENTD_TOOL_CONCURRENCY": "5",
        "AGENTD_SHUTDOWN_GRACE": str(GRACE),  # shorter than a turn: SIGTERM must hand work back
        "AGENTD_PORT": str(port),
    }
    settings = Settings(default_read_timeout=READ_TIMEOUT, lease_margin=2.0, heartbeat_interval=0.2)
    lifecycle = Lifecycle(pool, agents.registry(), settings)

    with fleet(tmp_path, database_url, **env) as f:
        api = f.start("api", "api")
        workers = [f.start(f"worker{i}", "worker") for i in (1, 2, 3)]
        await poll(
            lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), within=30, what="api /healthz"
        )

        async def three_registered() -> bool:
            return {w.pid for w in workers} <= set(await live_workers(pool))

        await poll(three_registered, within=30, what="three workers registered")
        ids = [
            (
                await lifecycle.start(
                    agent="calc", message=f"loop {i}", state={"llm": fake_llm.base_url}
                )
            ).id
            for i in range(LOOPS)
        ]
        registered = await live_workers(pool)
        victim_kill, victim_term, survivor = workers
        kill_id = registered[victim_kill.pid]["id"]
        term_id = registered[victim_term.pid]["id"]

        # SIGTERM when the victim holds a turn claimed so recently that it cannot finish
        # within the grace: that turn must be handed back, not finished by the victim.
        fresh = TURN_DELAY - GRACE - 0.5

        async def both_busy() -> bool:
            return bool(await _held_by(pool, kill_id)) and bool(
                await _held_by(pool, term_id, started_within=fresh)
            )

        await poll(both_busy, within=30, what="both victims hold running turns", interval=0.02)
        victim_kill.signal(signal.SIGKILL)
        held_at_term = await _held_by(pool, term_id)
        t0 = time.monotonic()
        victim_term.signal(signal.SIGTERM)
        assert held_at_term, "the SIGTERMed worker held turns when signalled"

        # Graceful: exits 0 within grace + hand-back, and deregisters itself.
        assert await victim_term.wait(within=20) == 0, victim_term.tail()
        assert await victim_kill.wait(within=5) == -signal.SIGKILL
        replacement = f.start("worker4", "worker")

        async def victims_gone() -> bool:
            live = await live_workers(pool)
            return victim_kill.pid not in live and victim_term.pid not in live

        await poll(victims_gone, within=20, what="dead worker reaped, stopped one deregistered")

        # The SIGTERMed worker's turns finish long before their 122 s lease could expire.
        async def term_loops_done() -> bool:
            async with connection(pool) as conn:
                n = await conn.fetchval(
                    "SELECT count(*) FROM loops WHERE id = ANY($1::uuid[]) "
                    "AND status = 'completed'",
                    list(held_at_term),
                )
            return n == len(held_at_term)

        await poll(term_loops_done, within=45, what="SIGTERMed worker's loops resumed")
        resumed_after = time.monotonic() - t0
        assert resumed_after < READ_TIMEOUT / 3, resumed_after

        await poll(lambda: all_completed(pool, LOOPS), within=60, what="every loop completed")
        assert time.monotonic() - t0 < READ_TIMEOUT / 2
        await assert_exactly_once(pool, ids)

        # The survivors and the replacement did the rest; the API stayed up throughout.
        assert survivor.returncode() is None and replacement.returncode() is None
        assert api.returncode() is None
        assert await http_ok(f"http://127.0.0.1:{port}/readyz")
        assert "worker.released" in victim_term.output()
        # Steps of a loop: one LLM answer per step, three steps, four tool calls.
        async with connection(pool) as conn:
            steps = await conn.fetchval("SELECT array_agg(DISTINCT step_count) FROM loops")
            ncalls = await conn.fetchval("SELECT count(*) FROM tool_calls")
        assert steps == [3]
        assert ncalls == LOOPS * 4

        for w in (survivor, replacement):
            w.signal(signal.SIGTERM)
        api.signal(signal.SIGTERM)
        for p in (survivor, replacement, api):
            assert await p.wait(within=30) == 0, p.tail()

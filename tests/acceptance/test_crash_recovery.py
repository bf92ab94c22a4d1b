"""Kill -9 real `agentd worker` processes mid-stream, mid-tool and between a tool's checkpoint
and its continuation; SIGTERM one mid-turn. Another worker must carry every loop to the end
with exactly one record per turn and per tool call, and well inside the lease."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.store import loops, messages
from agentd.testing import agents
from agentd.testing.agents import invocations
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

from ._procs import LEASE, assert_exactly_once, fleet, lifecycle_settings, loop_row, poll

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(120)]

#: A dead worker's turn must be running again within this (the lease is 12 s).
RECOVERY_BUDGET = LEASE / 3
SLOW_TEXT = "Let me work this out carefully, one digit at a time. " * 12  # ~640 characters
# A stream that outlasts any worker start (~8 minutes at 4 characters per 30 ms): the test
# kills its worker mid-stream whenever the standby worker is up, never racing its end.
ENDLESS_TEXT = SLOW_TEXT * 100


def from_user(last: Any) -> bool:
    return last.role == "user"


def from_tool(last: Any) -> bool:
    return last.role == "tool"


def lifecycle(pool: Pool) -> Lifecycle:
    return Lifecycle(pool, agents.registry(), lifecycle_settings())


async def all_messages(pool: Pool, loop_id: uuid.UUID) -> list[Any]:
    async with connection(pool) as conn:
        return await messages.list_(conn, loop_id=loop_id, include_hidden=True)


async def streaming_partial(pool: Pool, loop_id: uuid.UUID) -> bool:
    return any(
        m.status == "processing" and m.hidden and len(m.content or "") > 8
        for m in await all_messages(pool, loop_id)
    )


async def completed(pool: Pool, loop_id: uuid.UUID) -> bool:
    return (await loop_row(pool, loop_id))["status"] == "completed"


def report(name: str, seconds: float) -> None:
    print(f"\nRECOVERY {name}: {seconds:.3f}s (lease {LEASE:g}s)")


async def test_sigkill_mid_stream_reruns_the_turn_at_once_with_one_answer_per_step(
    pool: Pool, database_url: str, tmp_path: Path
) -> None:
    async with FakeLLM() as fake, fleet(tmp_path, database_url) as f:
        fake.add(
            Rule(
                match=from_user,
                reply=Reply(
                    content=ENDLESS_TEXT,
                    tool_calls=[ToolCall("add", {"a": 2, "b": 3})],
                    chunk_size=4,
                    chunk_delay=0.03,
                ),
                times=1,
            )
        )
        fake.add(
            Rule(
                match=from_user,
                reply=Reply(content="Adding.", tool_calls=[ToolCall("add", {"a": 2, "b": 3})]),
            )
        )
        fake.add(Rule(match=from_tool, reply=Reply(content="The sum is 5.")))
        a = await f.worker("worker-a", pool)
        loop = await lifecycle(pool).start(
            agent="calc", message="add 2 and 3", state={"llm": fake.base_url, "stream": True}
        )
        await poll(lambda: streaming_partial(pool, loop.id), within=15, what="partial streamed")
        b = await f.worker("worker-b", pool)
        assert (await loop_row(pool, loop.id))["worker_id"] == a.worker_id
        assert len(fake.requests) == 1

        a.kill9()
        killed = time.monotonic()

        async def rerun() -> bool:
            return len(fake.requests) >= 2

        await poll(rerun, within=LEASE, what="the dead worker's turn sent again", interval=0.01)
        recovery = time.monotonic() - killed
        report("mid-stream", recovery)
        await poll(lambda: completed(pool, loop.id), within=20, what="loop completed")
        assert await a.exited(5) == -signal.SIGKILL
        assert b.returncode is None

    assert recovery < RECOVERY_BUDGET, recovery
    await assert_exactly_once(pool, [loop.id])
    rows = await all_messages(pool, loop.id)
    assistant = [(m.step, m.hidden, m.status, m.content) for m in rows if m.role == "assistant"]
    (_, dead_hidden, dead_status, dead_content) = assistant[0]
    assert dead_hidden and dead_status == "failed" and ENDLESS_TEXT.startswith(dead_content)
    assert assistant[1:] == [
        (1, False, "completed", "Adding."),
        (2, False, "completed", "The sum is 5."),
    ]
    assert [m.content for m in rows if m.role == "tool"] == ["5"]
    assert fake.requests[0].json == fake.requests[1].json  # the same turn, sent again
    assert len(fake.requests) == 3


async def test_sigkill_mid_tool_reruns_the_call_once_with_the_same_idempotency_key(
    pool: Pool, database_url: str, tmp_path: Path
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "hold").touch()
    async with FakeLLM() as fake, fleet(tmp_path, database_url) as f:
        fake.add(
            Rule(match=from_user, reply=Reply(tool_calls=[ToolCall("slow_add", {"a": 2, "b": 3})]))
        )
        fake.add(Rule(match=from_tool, reply=Reply(content="The sum is 5.")))
        a = await f.worker("worker-a", pool)
        loop = await lifecycle(pool).start(
            agent="probe", message="add", state={"llm": fake.base_url, "probe_dir": str(probe)}
        )
        await poll(lambda: _count(probe, 1), within=15, what="tool invoked")
        b = await f.worker("worker-b", pool)

        a.kill9()
        killed = time.monotonic()
        await poll(lambda: _count(probe, 2), within=LEASE, what="tool invoked again")
        recovery = time.monotonic() - killed
        report("mid-tool", recovery)
        (probe / "hold").unlink()
        await poll(lambda: completed(pool, loop.id), within=20, what="loop completed")
        assert await a.exited(5) == -signal.SIGKILL

    assert recovery < RECOVERY_BUDGET, recovery
    await assert_exactly_once(pool, [loop.id])
    first, second = invocations(probe)
    assert first["key"] == second["key"] and first["key"].startswith("agentd:tool_call:")
    assert (first["pid"], second["pid"]) == (a.pid, b.pid)
    rows = await all_messages(pool, loop.id)
    assert [m.content for m in rows if m.role == "tool"] == ["5"]
    # The reclaim is on record, naming the call and why.
    call_id = int(first["key"].rsplit(":", 1)[1])
    reclaims = await pool.fetch(
        "SELECT reason, tool_call_id FROM events WHERE loop_id = $1 AND name = $2",
        loop.id,
        "tool_call.reclaimed",
    )
    (reclaim,) = reclaims
    assert reclaim["tool_call_id"] == call_id
    assert reclaim["reason"] in ("reaped_worker_dead", "reaped_lease_expired")


async def test_sigkill_between_checkpoint_and_continuation_replays_without_rerunning(
    pool: Pool, database_url: str, tmp_path: Path
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "crash_after_checkpoint").touch()
    async with FakeLLM() as fake, fleet(tmp_path, database_url) as f:
        fake.add(
            Rule(match=from_user, reply=Reply(tool_calls=[ToolCall("slow_add", {"a": 2, "b": 3})]))
        )
        fake.add(Rule(match=from_tool, reply=Reply(content="The sum is 5.")))
        a = await f.worker("worker-a", pool)
        loop = await lifecycle(pool).start(
            agent="probe", message="add", state={"llm": fake.base_url, "probe_dir": str(probe)}
        )
        assert await a.exited(20) == -signal.SIGKILL  # it killed itself after the checkpoint
        async with connection(pool) as conn:
            (call,) = await conn.fetch("SELECT * FROM tool_calls WHERE loop_id = $1", loop.id)
        assert call["executed_at"] is not None and call["result"] == "5"
        assert call["response_message_id"] is None and call["lease_worker_id"] == a.worker_id
        (probe / "crash_after_checkpoint").unlink()

        b = await f.worker("worker-b", pool)
        await poll(lambda: completed(pool, loop.id), within=LEASE, what="loop completed")
        assert b.returncode is None

    await assert_exactly_once(pool, [loop.id])
    (only,) = invocations(probe)  # the tool ran once, in the dead worker
    assert only["pid"] == a.pid
    rows = await all_messages(pool, loop.id)
    assert [m.content for m in rows if m.role == "tool"] == ["5"]
    async with connection(pool) as conn:
        reasons = await conn.fetch(
            "SELECT reason FROM events WHERE loop_id = $1 AND name = 'tool_call.completed'",
            loop.id,
        )
    assert [r["reason"] for r in reasons] == ["replayed"]


@pytest.mark.parametrize("phase", ["stream", "tool"])
async def test_sigterm_hands_work_back_at_once_and_exits_zero(
    pool: Pool, database_url: str, tmp_path: Path, phase: str
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "hold").touch()
    async with FakeLLM() as fake, fleet(tmp_path, database_url) as f:
        slow = Reply(content=SLOW_TEXT * 3, chunk_size=4, chunk_delay=0.03)
        if phase == "stream":
            fake.add(Rule(match=from_user, reply=slow, times=1))
        fake.add(
            Rule(match=from_user, reply=Reply(tool_calls=[ToolCall("slow_add", {"a": 2, "b": 3})]))
        )
        fake.add(Rule(match=from_tool, reply=Reply(content="The sum is 5.")))
        a = await f.worker("worker-a", pool, AGENTD_SHUTDOWN_GRACE="0.5")
        loop = await lifecycle(pool).start(
            agent="probe",
            message="add",
            state={"llm": fake.base_url, "probe_dir": str(probe), "stream": True},
        )
        if phase == "stream":
            await poll(lambda: streaming_partial(pool, loop.id), within=15, what="streaming")
        else:
            await poll(lambda: _count(probe, 1), within=15, what="tool invoked")
        held = await loop_row(pool, loop.id)

        a.terminate()
        terminated = time.monotonic()
        assert await a.exited(10) == 0
        report(f"sigterm-{phase} (SIGTERM to exit 0, grace 0.5s)", time.monotonic() - terminated)
        row = await loop_row(pool, loop.id)
        async with connection(pool) as conn:
            left = await conn.fetch("SELECT * FROM jobs WHERE loop_id = $1", loop.id)
            calls = await conn.fetch("SELECT * FROM tool_calls WHERE loop_id = $1", loop.id)
            registered = await conn.fetchval("SELECT count(*) FROM workers")
        assert registered == 0  # it deregistered: nobody has to detect its death
        (job,) = left
        if phase == "stream":
            assert row["status"] == "queued" and row["status_reason"] == "released_on_shutdown"
            assert row["execution_token"] not in (None, held["execution_token"])
            assert job["queue"] == "llm" and job["generation"] == row["execution_token"]
            shell = [m for m in await all_messages(pool, loop.id) if m.role == "assistant"]
            assert [(m.status, m.hidden) for m in shell] == [("failed", True)]
        else:
            (call,) = calls
            assert call["lease_token"] is None and call["status"] == "pending"
            assert job["queue"] == "tool" and job["tool_call_id"] == call["id"]
            assert job["generation"] == row["execution_token"] == held["execution_token"]
        (probe / "hold").unlink()

        b_started = time.monotonic()
        b = await f.worker("worker-b", pool)

        async def resumed() -> bool:
            if phase == "stream":
                return len(fake.requests) >= 2
            return await _count(probe, 2)

        await poll(resumed, within=LEASE, what="resumed by worker-b")
        report(f"sigterm-{phase} (worker-b start to resume)", time.monotonic() - b_started)
        await poll(lambda: completed(pool, loop.id), within=20, what="loop completed")
        assert b.returncode is None

    await assert_exactly_once(pool, [loop.id])
    if phase == "tool":
        first, second = invocations(probe)
        assert first["key"] == second["key"]
    async with connection(pool) as conn:
        final = await loops.get(conn, loop_id=loop.id)
    assert final is not None and final.step_count == 2


async def _count(probe: Path, n: int) -> bool:
    await asyncio.sleep(0)
    return len(invocations(probe)) >= n

"""Reaper sweeps on rows written in any state (no test waits for time to pass)."""

from __future__ import annotations

import asyncio
import uuid

from agentd.db.pool import Pool, connection, transaction
from agentd.engine.reaper import Reaper, ReapReport
from agentd.store import events, jobs, loops, messages, tool_calls
from agentd.testing import factories
from agentd.testing.engine import fast_settings


def reaper(pool: Pool) -> Reaper:
    return Reaper(fast_settings(queued_reap_threshold=300.0), pool)


async def jobs_of(pool: Pool, loop_id: uuid.UUID) -> list[dict]:  # type: ignore[type-arg]
    async with connection(pool) as conn:
        return await jobs.list_for_loop(conn, loop_id=loop_id)


async def loop_of(pool: Pool, loop_id: uuid.UUID):  # type: ignore[no-untyped-def]
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop_id)
    assert row is not None
    return row


async def call_of(pool: Pool, tool_call_id: int):  # type: ignore[no-untyped-def]
    async with connection(pool) as conn:
        row = await tool_calls.get(conn, tool_call_id=tool_call_id)
    assert row is not None
    return row


async def test_expired_llm_lease_is_requeued_with_a_rotated_token(pool: Pool) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running", lease_in=-1, worker_id=uuid.uuid4())
        shell = await factories.shell(conn, loop, content="half an ans")
    report = await reaper(pool).sweep_once()
    assert report == ReapReport(expired_turns=1)
    row = await loop_of(pool, loop.id)
    assert row.status == "queued" and row.status_reason == "reaped_lease_expired"
    assert row.execution_token not in (None, loop.execution_token)
    assert row.lease_expires_at is None and row.worker_id is None
    (job,) = await jobs_of(pool, loop.id)
    assert job["queue"] == "llm" and job["generation"] == row.execution_token
    async with connection(pool) as conn:
        (partial,) = [
            m
            for m in await messages.list_(conn, loop_id=loop.id, include_hidden=True)
            if m.id == shell.id
        ]
    assert partial.status == "failed" and partial.hidden


async def test_live_lease_is_left_alone(pool: Pool) -> None:
    async with transaction(pool) as conn:
        alive = await factories.worker(conn)
        loop = await factories.loop(conn, status="running", lease_in=30, worker_id=alive)
    assert not await reaper(pool).sweep_once()
    row = await loop_of(pool, loop.id)
    assert row.status == "running" and row.execution_token == loop.execution_token


async def test_dead_workers_turns_and_tool_calls_are_reclaimed_before_their_leases_expire(
    pool: Pool,
) -> None:
    async with transaction(pool) as conn:
        dead = await factories.worker(conn, dead=True)
        turn = await factories.loop(conn, status="running", lease_in=600, worker_id=dead)
        phase = await factories.loop(conn, status="running")
        call = await factories.tool_call(
            conn,
            phase,
            status="running",
            lease_token=uuid.uuid4(),
            leased_in=600,
            lease_worker_id=dead,
        )
    report = await reaper(pool).liveness_once()
    assert report == ReapReport(dead_workers=1, dead_worker_turns=1, dead_worker_tool_calls=1)
    row = await loop_of(pool, turn.id)
    assert row.status == "queued" and row.status_reason == "reaped_worker_dead"
    assert row.execution_token != turn.execution_token
    (job,) = await jobs_of(pool, turn.id)
    assert job["generation"] == row.execution_token
    reclaimed = await call_of(pool, call.id)
    assert reclaimed.lease_token is None and reclaimed.status == "pending"
    (tjob,) = await jobs_of(pool, phase.id)
    assert tjob["tool_call_id"] == call.id and tjob["generation"] == phase.execution_token
    async with connection(pool) as conn:
        assert await conn.fetchval("SELECT count(*) FROM workers") == 0


async def test_worker_with_a_stale_heartbeat_counts_as_dead(pool: Pool) -> None:
    async with transaction(pool) as conn:
        stale = await factories.worker(conn, heartbeat_ago=3600)
        loop = await factories.loop(conn, status="running", lease_in=600, worker_id=stale)
    report = await reaper(pool).liveness_once()
    assert report.dead_workers == 1 and report.dead_worker_turns == 1
    assert (await loop_of(pool, loop.id)).status == "queued"


async def test_a_reaper_never_counts_its_own_process_worker_dead(pool: Pool) -> None:
    # A reaper waking from a stall longer than the stale limit sees its own worker's
    # heartbeat as old as everyone's; that worker is alive (it is this process).
    async with transaction(pool) as conn:
        own = await factories.worker(conn, heartbeat_ago=3600)
        other = await factories.worker(conn, heartbeat_ago=3600)
        mine = await factories.loop(conn, status="running", lease_in=600, worker_id=own)
        theirs = await factories.loop(conn, status="running", lease_in=600, worker_id=other)
    settings = fast_settings(queued_reap_threshold=300.0)
    report = await Reaper(settings, pool, own_worker=own).liveness_once()
    assert report == ReapReport(dead_workers=1, dead_worker_turns=1)
    kept = await loop_of(pool, mine.id)
    assert kept.status == "running" and kept.execution_token == mine.execution_token
    assert (await loop_of(pool, theirs.id)).status == "queued"
    async with connection(pool) as conn:
        assert await conn.fetchval("SELECT array_agg(id) FROM workers") == [own]


async def test_stalled_tool_call_is_reenqueued_with_the_loops_generation(pool: Pool) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running")
        call = await factories.tool_call(
            conn, loop, status="running", lease_token=uuid.uuid4(), leased_in=-1
        )
    report = await reaper(pool).sweep_once()
    assert report == ReapReport(stalled_tool_calls=1)
    row = await call_of(pool, call.id)
    assert row.status == "pending" and row.lease_token is None and row.leased_until is None
    (job,) = await jobs_of(pool, loop.id)
    assert job["queue"] == "tool" and job["tool_call_id"] == call.id
    assert job["generation"] == loop.execution_token


async def test_checkpointed_call_whose_response_was_lost_is_reenqueued_to_replay(
    pool: Pool,
) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running")
        call = await factories.tool_call(
            conn, loop, executed=True, lease_token=uuid.uuid4(), leased_in=-1
        )
    assert await reaper(pool).sweep_once() == ReapReport(stalled_tool_calls=1)
    row = await call_of(pool, call.id)
    assert row.executed_at is not None and row.status == "completed"  # kept: it replays
    assert len(await jobs_of(pool, loop.id)) == 1


async def test_dropped_tool_enqueue_is_repaired(pool: Pool) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running")
        call = await factories.tool_call(conn, loop, updated_ago=60)
        fresh = await factories.tool_call(conn, loop)  # inside the grace window: left alone
    assert await reaper(pool).sweep_once() == ReapReport(stalled_tool_calls=1)
    (job,) = await jobs_of(pool, loop.id)
    assert job["tool_call_id"] == call.id != fresh.id


async def test_dropped_continuation_enqueues_the_next_turn(pool: Pool) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running", step_count=1)
        await factories.tool_call(conn, loop, responded=True)
        await factories.tool_call(conn, loop, responded=True)
        await factories.set_loop(conn, loop.id, updated_ago=60)
    assert await reaper(pool).sweep_once() == ReapReport(dropped_continuations=1)
    row = await loop_of(pool, loop.id)
    assert row.status == "queued" and row.status_reason == "reaped_dropped_continuation"
    assert row.execution_token != loop.execution_token
    (job,) = await jobs_of(pool, loop.id)
    assert job["queue"] == "llm" and job["generation"] == row.execution_token


async def test_tool_phase_with_an_unanswered_call_is_not_a_dropped_continuation(
    pool: Pool,
) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running", step_count=1)
        await factories.tool_call(conn, loop, responded=True)
        call = await factories.tool_call(conn, loop, lease_token=uuid.uuid4(), leased_in=30)
        await factories.set_loop(conn, loop.id, updated_ago=60)
    assert not await reaper(pool).sweep_once()
    assert (await loop_of(pool, loop.id)).status == "running"
    assert (await call_of(pool, call.id)).lease_token is not None


async def test_loop_queued_too_long_is_requeued_and_its_old_job_goes_stale(pool: Pool) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="queued", updated_ago=3600)
        await factories.job(conn, loop_id=loop.id, generation=loop.execution_token)
    assert await reaper(pool).sweep_once() == ReapReport(requeued_loops=1)
    row = await loop_of(pool, loop.id)
    assert row.status == "queued" and row.execution_token != loop.execution_token
    old, new = await jobs_of(pool, loop.id)
    assert old["generation"] == loop.execution_token  # dropped by the claim
    assert new["generation"] == row.execution_token


async def test_queued_loop_with_no_job_is_requeued_after_the_grace(pool: Pool) -> None:
    async with transaction(pool) as conn:
        lost = await factories.loop(conn, status="queued", updated_ago=60)
        fresh = await factories.loop(conn, status="queued")
        frozen = await factories.loop(conn, status="queued", updated_ago=3600, frozen=True)
    assert await reaper(pool).sweep_once() == ReapReport(requeued_loops=1)
    assert len(await jobs_of(pool, lost.id)) == 1
    assert await jobs_of(pool, fresh.id) == []
    assert await jobs_of(pool, frozen.id) == []


async def test_orphaned_processing_shells_are_failed_and_hidden(pool: Pool) -> None:
    async with transaction(pool) as conn:
        paused = await factories.loop(conn, status="paused")
        orphan = await factories.shell(conn, paused, execution_token=uuid.uuid4(), updated_ago=60)
        moved_on = await factories.loop(conn, status="running", lease_in=30)
        stale = await factories.shell(conn, moved_on, execution_token=uuid.uuid4(), updated_ago=60)
        live = await factories.shell(conn, moved_on, updated_ago=60)  # the current turn's
    assert await reaper(pool).sweep_once() == ReapReport(orphaned_shells=2)
    async with connection(pool) as conn:
        rows = {
            m.id: m
            for lp in (paused.id, moved_on.id)
            for m in await messages.list_(conn, loop_id=lp, include_hidden=True)
        }
    assert rows[orphan.id].status == rows[stale.id].status == "failed"
    assert rows[orphan.id].hidden and rows[stale.id].hidden
    assert rows[live.id].status == "processing"


async def test_approval_past_its_deadline_expires_and_is_reenqueued(pool: Pool) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="waiting")
        late = await factories.tool_call(
            conn, loop, name="refund", approval_status="pending", approval_deadline_in=-1
        )
        timely = await factories.tool_call(
            conn, loop, name="refund", approval_status="pending", approval_deadline_in=600
        )
    assert await reaper(pool).sweep_once() == ReapReport(expired_approvals=1)
    row = await call_of(pool, late.id)
    assert row.approval_status == "expired" and row.decided_by == "reaper"
    (job,) = await jobs_of(pool, loop.id)
    assert job["tool_call_id"] == late.id and job["generation"] == loop.execution_token
    assert (await call_of(pool, timely.id)).approval_status == "pending"


async def test_reaper_never_touches_paused_frozen_or_parked_rows(pool: Pool) -> None:
    async with transaction(pool) as conn:
        await factories.loop(conn, status="paused", updated_ago=3600)
        frozen = await factories.loop(conn, status="running", frozen=True, updated_ago=3600)
        await factories.tool_call(
            conn, frozen, lease_token=uuid.uuid4(), leased_in=-1, updated_ago=3600
        )
        waiting = await factories.loop(conn, status="waiting", updated_ago=3600)
        await factories.tool_call(conn, waiting, name="refund", approval_status="pending")
    assert not await reaper(pool).sweep_once()


async def _everything_stuck(pool: Pool, n: int) -> list[uuid.UUID]:
    ids = []
    async with transaction(pool) as conn:
        dead = await factories.worker(conn, dead=True)
        for i in range(n):
            a = await factories.loop(conn, status="running", lease_in=-1)
            b = await factories.loop(conn, status="running", lease_in=600, worker_id=dead)
            c = await factories.loop(conn, status="running")
            await factories.tool_call(conn, c, lease_token=uuid.uuid4(), leased_in=-1)
            d = await factories.loop(conn, status="running", step_count=1)
            await factories.tool_call(conn, d, responded=True)
            await factories.set_loop(conn, d.id, updated_ago=60)
            e = await factories.loop(conn, status="queued", updated_ago=3600)
            f = await factories.loop(conn, status="waiting")
            await factories.tool_call(
                conn, f, name="refund", approval_status="pending", approval_deadline_in=-1
            )
            ids += [a.id, b.id, c.id, d.id, e.id, f.id]
            del i
    return ids


async def test_two_reapers_at_once_produce_one_job_per_stuck_row(pool: Pool) -> None:
    ids = await _everything_stuck(pool, 5)
    first, second = await asyncio.gather(reaper(pool).sweep_once(), reaper(pool).sweep_once())
    total = ReapReport(
        **{k: getattr(first, k) + getattr(second, k) for k in first.as_log() | second.as_log()}
    )
    assert total == ReapReport(
        dead_workers=total.dead_workers,  # both may see the same dead worker
        expired_turns=5,
        dead_worker_turns=5,
        stalled_tool_calls=5,
        dropped_continuations=5,
        requeued_loops=5,
        expired_approvals=5,
    )
    assert total.dead_workers in (1, 2)
    for loop_id in ids:
        assert len(await jobs_of(pool, loop_id)) == 1, loop_id


async def test_a_second_sweep_finds_nothing(pool: Pool) -> None:
    await _everything_stuck(pool, 2)
    assert await reaper(pool).sweep_once()
    assert await reaper(pool).sweep_once() == ReapReport()


async def test_sweep_records_its_run_fleet_wide(pool: Pool) -> None:
    await reaper(pool).sweep_once()
    async with connection(pool) as conn:
        last = await conn.fetchval("SELECT last_run_at FROM maintenance WHERE name = 'reaper'")
    assert last is not None


async def test_sequential_calls_waiting_their_turn_are_not_stalled(pool: Pool) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running", step_count=1)
        await factories.tool_call(
            conn, loop, sequential=True, lease_token=uuid.uuid4(), leased_in=30
        )
        await factories.tool_call(conn, loop, sequential=True, updated_ago=60)
        parked = await factories.loop(conn, status="waiting", step_count=1)
        await factories.tool_call(conn, parked, sequential=True, approval_status="pending")
        await factories.tool_call(conn, parked, sequential=True, updated_ago=60)
    assert not await reaper(pool).sweep_once()
    assert await jobs_of(pool, loop.id) == [] and await jobs_of(pool, parked.id) == []


async def test_dead_worker_stays_known_until_every_row_it_held_is_reclaimed(pool: Pool) -> None:
    async with transaction(pool) as conn:
        dead = await factories.worker(conn, dead=True)
        loop = await factories.loop(conn, status="running", lease_in=600, worker_id=dead)
    async with pool.acquire() as blocker, blocker.transaction():
        # Someone briefly holds the loop row (a lifecycle call, a finalizer; an FK insert's
        # KEY SHARE no longer blocks anyone): the liveness pass skips it, and must not
        # forget the dead worker meanwhile.
        await blocker.execute("SELECT 1 FROM loops WHERE id = $1 FOR NO KEY UPDATE", loop.id)
        first = await reaper(pool).liveness_once()
    assert first.dead_worker_turns == 0
    second = await reaper(pool).liveness_once()
    assert second.dead_worker_turns == 1 and second.dead_workers == 1
    assert (await loop_of(pool, loop.id)).status == "queued"


async def reclaim_events(
    pool: Pool, loop_id: uuid.UUID
) -> list[tuple[str, str | None, int | None]]:
    async with connection(pool) as conn:
        rows = await events.list_(conn, loop_id=loop_id)
    return [(e.name, e.reason, e.tool_call_id) for e in rows if e.name.endswith(".reclaimed")]


async def test_every_reclaim_is_an_event_naming_the_turn_or_call_and_why(pool: Pool) -> None:
    async with transaction(pool) as conn:
        dead = await factories.worker(conn, dead=True)
        crashed = await factories.loop(conn, status="running", lease_in=600, worker_id=dead)
        expired = await factories.loop(conn, status="running", lease_in=-1, worker_id=uuid.uuid4())
        phase = await factories.loop(conn, status="running")
        held = await factories.tool_call(
            conn,
            phase,
            status="running",
            lease_token=uuid.uuid4(),
            leased_in=600,
            lease_worker_id=dead,
        )
        lapsed = await factories.tool_call(
            conn, phase, status="running", lease_token=uuid.uuid4(), leased_in=-1
        )
        lost = await factories.tool_call(conn, phase, updated_ago=60)
        healthy = await factories.loop(conn, status="running", lease_in=600, worker_id=uuid.uuid4())
    await reaper(pool).sweep_once()
    assert await reclaim_events(pool, crashed.id) == [
        ("turn.reclaimed", "reaped_worker_dead", None)
    ]
    assert await reclaim_events(pool, expired.id) == [
        ("turn.reclaimed", "reaped_lease_expired", None)
    ]
    assert sorted(await reclaim_events(pool, phase.id), key=lambda e: e[2] or 0) == [
        ("tool_call.reclaimed", "reaped_worker_dead", held.id),
        ("tool_call.reclaimed", "reaped_lease_expired", lapsed.id),
        ("tool_call.reclaimed", "reaped_job_lost", lost.id),
    ]
    async with connection(pool) as conn:
        logs = [e.log or "" for e in await events.list_(conn, loop_id=phase.id)]
    assert any(f"agentd:tool_call:{held.id}" in line for line in logs)
    assert await reclaim_events(pool, healthy.id) == []
    # Nothing left to reclaim, nothing more recorded.
    await reaper(pool).sweep_once()
    assert len(await reclaim_events(pool, phase.id)) == 3

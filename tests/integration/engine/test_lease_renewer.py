"""The one heartbeat: renews registered leases, and shares its connection safely."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from agentd.db.pool import Pool, connection, transaction
from agentd.engine.lease_renewer import LeaseRenewer
from agentd.errors import DatabaseError
from agentd.registry import AgentRegistry
from agentd.testing import factories
from agentd.testing.engine import fast_settings, running_engine


def renewer(database_url: str) -> LeaseRenewer:
    return LeaseRenewer(
        fast_settings(), database_url, worker_id=uuid.uuid4(), hostname="test", queues=["llm"]
    )


async def test_shutdown_steps_racing_a_heartbeat_tick_do_not_break_the_connection(
    pool: Pool, database_url: str
) -> None:
    r = renewer(database_url)
    await r.connect()
    try:
        async with transaction(pool) as conn:
            loop = await factories.loop(conn, status="running", lease_in=5)
        r.register_turn(loop.id, loop.execution_token, 12.0, 60.0, None)  # type: ignore[arg-type]
        for _ in range(20):  # the tick and the shutdown step share one connection
            await asyncio.gather(r.renew_once(), r.set_stopping())
        assert r.lost_count == 0 and r.renewal_count == 20
        async with connection(pool) as conn:
            row = await conn.fetchrow("SELECT stopping FROM workers WHERE id = $1", r.worker_id)
        assert row is not None and row["stopping"]
    finally:
        await r.close()
    async with connection(pool) as conn:
        assert await conn.fetchval("SELECT count(*) FROM workers") == 0


async def test_renewal_extends_only_leases_whose_token_still_holds(
    pool: Pool, database_url: str
) -> None:
    r = renewer(database_url)
    await r.connect()
    try:
        async with transaction(pool) as conn:
            kept = await factories.loop(conn, status="running", lease_in=1)
            rotated = await factories.loop(conn, status="running", lease_in=1)
        task = asyncio.create_task(asyncio.Event().wait())
        r.register_turn(kept.id, kept.execution_token, 12.0, 60.0, None)  # type: ignore[arg-type]
        lost = r.register_turn(rotated.id, uuid.uuid4(), 12.0, 60.0, task)  # a stale token
        await r.renew_once()
        async with connection(pool) as conn:
            left = await conn.fetchval(
                "SELECT extract(epoch FROM lease_expires_at - now()) FROM loops WHERE id = $1",
                kept.id,
            )
        assert left > 10  # renewed for the whole lease
        assert lost.lost and lost.reason == "token_rotated"
        await asyncio.wait({task}, timeout=1)
        assert task.cancelled()  # the stale turn is cancelled at once
        assert r.in_flight() == ([r._llm[kept.id]], [])
    finally:
        await r.close()


async def test_a_turn_settled_by_its_commit_is_not_cancelled_by_the_next_tick(
    pool: Pool, database_url: str
) -> None:
    # The window between a finalizer's commit and the turn unwinding: the commit ended the
    # lease in the database (a completed loop has no token; a finished call no lease), so
    # the tick no longer finds it. A settled turn is left to finish; an unsettled one with
    # the same view is cancelled as taken, as before.
    r = renewer(database_url)
    await r.connect()
    try:
        async with transaction(pool) as conn:
            done = await factories.loop(conn, status="running", lease_in=5)
            taken = await factories.loop(conn, status="running", lease_in=5)
        finishing = asyncio.create_task(asyncio.Event().wait())
        stale = asyncio.create_task(asyncio.Event().wait())
        settled = r.register_turn(done.id, done.execution_token, 12.0, 60.0, finishing)  # type: ignore[arg-type]
        lost = r.register_turn(taken.id, taken.execution_token, 12.0, 60.0, stale)  # type: ignore[arg-type]
        tick = asyncio.create_task(r.renew_once())  # snapshots both leases, then awaits
        await asyncio.sleep(0)
        async with transaction(pool) as conn:
            await conn.execute(
                "UPDATE loops SET status = 'completed', execution_token = NULL,"
                " lease_expires_at = NULL WHERE id = ANY($1::uuid[])",
                [done.id, taken.id],
            )
            # Settled before the commit is visible: the tick's answer, read whenever it
            # comes, always finds it settled. (Settling after the commit returns races the
            # tick's answer to the event loop, which is what this test must not depend on.)
            r.settle_turn(done.id, done.execution_token)
        await tick
        await r.renew_once()
        assert settled.settled and not settled.lost and not finishing.done()
        assert lost.lost and lost.reason == "token_rotated" and r.lost_count == 1
        await asyncio.wait({stale}, timeout=1)
        assert stale.cancelled()
        r.settle_turn(taken.id, taken.execution_token)  # too late: lost stays lost
        assert not lost.settled and r.in_flight() == ([], [])
        finishing.cancel()
    finally:
        await r.close()


async def test_graceful_stop_deregisters_the_worker(
    pool: Pool, database_url: str, registry: AgentRegistry
) -> None:
    for _ in range(3):
        async with running_engine(pool, database_url, registry) as engine:
            await engine.renewer.renewed.wait_for(2)
        async with connection(pool) as conn:
            assert await conn.fetchval("SELECT count(*) FROM workers") == 0


async def test_claiming_the_same_loop_again_cancels_the_earlier_stale_turn(
    database_url: str,
) -> None:
    r = renewer(database_url)  # never connected: registration alone decides this
    loop_id, call_id = uuid.uuid4(), 7
    stale = asyncio.create_task(asyncio.Event().wait())
    stale_call = asyncio.create_task(asyncio.Event().wait())
    old = r.register_turn(loop_id, uuid.uuid4(), 12.0, 60.0, stale)  # type: ignore[arg-type]
    old_call = r.register_tool(call_id, uuid.uuid4(), 12.0, stale_call)  # type: ignore[arg-type]
    new = r.register_turn(loop_id, uuid.uuid4(), 12.0, 60.0, None)
    new_call = r.register_tool(call_id, uuid.uuid4(), 12.0, None)
    await asyncio.wait({stale, stale_call}, timeout=1)
    assert stale.cancelled() and stale_call.cancelled()
    assert old.lost and old_call.lost and old.reason == "token_rotated"
    assert r.in_flight() == ([new], [new_call])


async def test_a_turn_given_up_in_an_outage_is_released_once_the_database_answers(
    pool: Pool, database_url: str
) -> None:
    """release_turn while the database is unreachable: the release is retried (not
    dropped) and goes through at the first attempt after it answers; the lease is no
    longer renewed meanwhile, and a turn that moved on (another token) is left alone."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]  # nothing listens here: connections are refused
    r = renewer(database_url)
    live_url = r.url
    r.url = f"postgresql://postgres@127.0.0.1:{dead_port}/postgres"
    stop = asyncio.Event()
    try:
        async with transaction(pool) as conn:
            given_up = await factories.loop(conn, status="running", lease_in=60)
            moved_on = await factories.loop(conn, status="running", lease_in=60)
        assert given_up.execution_token is not None
        lease = r.register_turn(given_up.id, given_up.execution_token, 60.0, 60.0, None)
        r.release_turn(given_up.id, given_up.execution_token)
        r.release_turn(moved_on.id, uuid.uuid4())  # its token rotated since: fenced out
        assert lease.settled and r.in_flight() == ([], [])
        with pytest.raises(DatabaseError):  # refused: kept for the next attempt
            await r.release_owed()
        assert len(r.owed()[0]) == 2 and r.released_count == 0
        runner = asyncio.create_task(r._run_releases(stop))
        r.url = live_url  # the database is back
        await r.released.wait_for(1, within=5)
        assert r.owed() == ({}, {})
        async with connection(pool) as conn:
            rows = {
                x["id"]: x
                for x in await conn.fetch(
                    "SELECT id, status, status_reason FROM loops WHERE id = ANY($1::uuid[])",
                    [given_up.id, moved_on.id],
                )
            }
            jobs = await conn.fetchval(
                "SELECT count(*) FROM jobs WHERE loop_id = $1 AND queue = 'llm'", given_up.id
            )
        assert rows[given_up.id]["status"] == "queued"
        assert rows[given_up.id]["status_reason"] == "released_after_outage" and jobs == 1
        assert rows[moved_on.id]["status"] == "running"
        stop.set()
        await runner
    finally:
        stop.set()
        await r.close()

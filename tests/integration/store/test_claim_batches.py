"""Batch claims: one call claims up to N jobs, each fenced as a single claim; loops in flight
are served before new loops' first turns; a concurrency key is never over its limit inside a
batch and its waiting loops are taken in start order; racing claimers never share a job."""

from __future__ import annotations

import asyncio
import uuid

from agentd.db.pool import Connection, Pool, connection, transaction
from agentd.states import LoopStatus
from agentd.store import jobs, loops
from agentd.store.models import Loop
from agentd.testing import factories


async def queued(
    conn: Connection,
    *,
    first_turn: bool = False,
    key: str | None = None,
    limit: int | None = None,
    frozen: bool = False,
) -> Loop:
    """A queued loop with a job on its generation (a key: a slot of it is needed)."""
    loop = await factories.loop(conn, status=LoopStatus.QUEUED, frozen=frozen)
    if key is not None and limit is not None:
        set_ = await loops.set_concurrency(conn, loop_id=loop.id, key=key, limit=limit)
        assert set_ is not None
        loop = set_
    await factories.job(
        conn, loop_id=loop.id, generation=loop.execution_token, first_turn=first_turn
    )
    return loop


async def claim(pool: Pool, limit: int) -> list[jobs.LlmClaim]:
    async with connection(pool) as conn:
        return await jobs.claim_llm_many(
            conn, worker_id=uuid.uuid4(), default_lease=12.0, limit=limit
        )


def claimed(claims: list[jobs.LlmClaim]) -> list[uuid.UUID]:
    return [c.loop.id for c in claims if c.loop is not None]


async def statuses(pool: Pool, ids: list[uuid.UUID]) -> list[str]:
    async with connection(pool) as conn:
        rows = await conn.fetch("SELECT id, status FROM loops WHERE id = ANY ($1)", ids)
    by_id = {r["id"]: r["status"] for r in rows}
    return [by_id[i] for i in ids]


async def jobs_left(pool: Pool) -> int:
    async with connection(pool) as conn:
        n: int = await conn.fetchval("SELECT count(*) FROM jobs WHERE queue = 'llm'")
    return n


async def test_one_call_claims_up_to_its_limit_each_with_a_fresh_token(pool: Pool) -> None:
    async with transaction(pool) as conn:
        made = [await queued(conn) for _ in range(5)]
    got = await claim(pool, limit=3)
    assert claimed(got) == [m.id for m in made[:3]]  # oldest first
    tokens = {c.loop.execution_token for c in got if c.loop is not None}
    assert len(tokens) == 3 and not tokens & {m.execution_token for m in made}
    assert all(c.taken and c.prefetch is not None for c in got)
    assert await statuses(pool, [m.id for m in made]) == ["running"] * 3 + ["queued"] * 2
    assert await jobs_left(pool) == 2
    assert claimed(await claim(pool, limit=10)) == [m.id for m in made[3:]]
    assert await claim(pool, limit=10) == []


async def test_one_call_claims_at_most_max_claim_batch(pool: Pool) -> None:
    async with transaction(pool) as conn:
        for _ in range(jobs.MAX_CLAIM_BATCH + 2):
            await queued(conn)
    assert len(await claim(pool, limit=1000)) == jobs.MAX_CLAIM_BATCH
    assert await jobs_left(pool) == 2


async def test_a_stale_job_in_a_batch_is_dropped_and_the_others_are_claimed(pool: Pool) -> None:
    async with transaction(pool) as conn:
        fresh = await queued(conn)
        moved_on = await queued(conn)
        await factories.set_loop(conn, moved_on.id, execution_token=uuid.uuid4())
        frozen = await queued(conn, frozen=True)
    got = await claim(pool, limit=10)
    assert claimed(got) == [fresh.id]
    dropped = [c for c in got if c.loop is None]
    assert {c.loop_id for c in dropped} == {moved_on.id, frozen.id}
    assert all(c.taken for c in dropped)  # the stale jobs are gone, never run
    assert await statuses(pool, [moved_on.id, frozen.id]) == ["queued", "queued"]
    assert await jobs_left(pool) == 0


async def test_continuations_are_claimed_before_first_turns(pool: Pool) -> None:
    async with transaction(pool) as conn:
        new = [await queued(conn, first_turn=True) for _ in range(3)]
        in_flight = [await queued(conn) for _ in range(2)]
    assert claimed(await claim(pool, limit=2)) == [m.id for m in in_flight]
    assert claimed(await claim(pool, limit=2)) == [m.id for m in new[:2]]


async def test_a_batch_never_takes_more_of_a_key_than_its_limit_and_takes_the_oldest(
    pool: Pool,
) -> None:
    async with transaction(pool) as conn:
        keyed = [await queued(conn, key="k", limit=2) for _ in range(4)]
        free = await queued(conn)
    got = await claim(pool, limit=10)
    assert set(claimed(got)) == {free.id, keyed[0].id, keyed[1].id}
    left = [c for c in got if not c.taken]
    assert {c.loop_id for c in left} == {keyed[2].id, keyed[3].id}
    assert await jobs_left(pool) == 2  # the refused jobs stay, in line
    # The key is saturated: the next claim sees nothing, and never blocks on it.
    assert await claim(pool, limit=10) == []
    async with transaction(pool) as conn:  # one of the two finishes: its slot is given back
        await factories.set_loop(conn, keyed[0].id, status=LoopStatus.COMPLETED)
    assert claimed(await claim(pool, limit=10)) == [keyed[2].id]


async def test_a_key_that_refused_a_job_is_held_for_the_rest_of_the_batch(pool: Pool) -> None:
    """A newer loop of the key whose own limit would let it in does not pass an older one
    the key just refused: the key's loops run in start order."""
    async with transaction(pool) as conn:
        first = await queued(conn, key="k", limit=1)
        older = await queued(conn, key="k", limit=1)
        newer = await queued(conn, key="k", limit=3)
    got = await claim(pool, limit=10)
    assert claimed(got) == [first.id]
    assert {c.loop_id for c in got if not c.taken} == {older.id, newer.id}
    assert await statuses(pool, [older.id, newer.id]) == ["queued", "queued"]
    async with transaction(pool) as conn:
        await factories.set_loop(conn, first.id, status=LoopStatus.COMPLETED)
    assert claimed(await claim(pool, limit=10))[0] == older.id


async def test_two_racing_claimers_never_claim_the_same_job(pool: Pool) -> None:
    async with transaction(pool) as conn:
        plain = [await queued(conn, first_turn=bool(i % 2)) for i in range(40)]
        keyed = [await queued(conn, key="shared", limit=3) for _ in range(10)]
    seen: list[uuid.UUID] = []
    while True:
        rounds = await asyncio.gather(claim(pool, limit=17), claim(pool, limit=17))
        batch = [i for r in rounds for i in claimed(r)]
        if not batch:
            break
        seen += batch
    assert len(seen) == len(set(seen))  # no loop's turn claimed twice
    assert {m.id for m in plain} <= set(seen)
    assert len([m for m in keyed if m.id in seen]) == 3  # the key's limit, nothing over it
    async with connection(pool) as conn:
        running = await conn.fetchval("SELECT running FROM concurrency_keys WHERE key = 'shared'")
    assert running == 3


async def test_tool_jobs_are_claimed_in_one_call_each_call_leased_once(pool: Pool) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status=LoopStatus.RUNNING, step_count=1)
        calls = [await factories.tool_call(conn, loop) for _ in range(3)]
        # the second call's older job is of a generation that moved on: it is dropped, and
        # does not take the call's fresh job down with it
        await factories.job(
            conn, loop_id=loop.id, generation=uuid.uuid4(), tool_call_id=calls[1].id
        )
        for c in calls:
            await factories.job(
                conn, loop_id=loop.id, generation=loop.execution_token, tool_call_id=c.id
            )
        # a duplicate job for the first call
        await factories.job(
            conn, loop_id=loop.id, generation=loop.execution_token, tool_call_id=calls[0].id
        )
    async with connection(pool) as conn:
        got = await jobs.claim_tool_many(conn, worker_id=uuid.uuid4(), default_lease=30.0, limit=10)
    leased = [c.tool_call for c in got if c.tool_call is not None]
    assert sorted(tc.id for tc in leased) == sorted(c.id for c in calls)
    assert len({tc.lease_token for tc in leased}) == 3  # each its own lease token
    assert len([c for c in got if c.tool_call is None]) == 2  # stale and duplicate, dropped
    async with connection(pool) as conn:
        assert await conn.fetchval("SELECT count(*) FROM jobs") == 0

"""Lease SQL on a loop whose turn already finalized (running, in its tool phase, no lease)."""

from __future__ import annotations

import uuid

from agentd.db.pool import Pool, connection, transaction
from agentd.store import jobs, loops, tool_calls
from agentd.testing import factories


async def test_renewing_a_finalized_turn_does_not_lease_its_tool_phase(pool: Pool) -> None:
    # The heartbeat can tick between ResponseParsing's commit and the turn unregistering.
    async with transaction(pool) as conn:
        phase = await factories.loop(conn, status="running", step_count=1)
        await factories.tool_call(conn, phase, lease_token=uuid.uuid4(), leased_in=30)
        turn = await factories.loop(conn, status="running", lease_in=1)
    async with connection(pool) as conn:
        kept = await loops.renew_leases(
            conn,
            ids=[phase.id, turn.id],
            tokens=[phase.execution_token, turn.execution_token],  # type: ignore[list-item]
        )
        phase_row = await loops.get(conn, loop_id=phase.id)
        turn_row = await loops.get(conn, loop_id=turn.id)
    assert set(kept) == {phase.id, turn.id}  # still this generation: not a lost lease
    assert kept[phase.id] is None  # no lease in the tool phase
    assert kept[turn.id] is not None and 11 < kept[turn.id] <= 12  # renewed: 12 s left
    assert phase_row is not None and phase_row.lease_expires_at is None
    assert turn_row is not None and turn_row.lease_expires_at is not None
    assert turn.lease_expires_at is not None
    assert turn_row.lease_expires_at > turn.lease_expires_at


async def test_shutdown_release_leaves_a_finalized_turns_tool_phase_alone(pool: Pool) -> None:
    async with transaction(pool) as conn:
        phase = await factories.loop(conn, status="running", step_count=1)
        await factories.tool_call(conn, phase, lease_token=uuid.uuid4(), leased_in=30)
    async with transaction(pool) as conn:
        await loops.release_leases(
            conn,
            ids=[phase.id],
            tokens=[phase.execution_token],  # type: ignore[list-item]
        )
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=phase.id)
        left = await jobs.list_for_loop(conn, loop_id=phase.id)
    assert row is not None and row.status == "running"
    assert row.execution_token == phase.execution_token and left == []


async def test_a_lease_with_more_than_half_left_is_reported_not_rewritten(pool: Pool) -> None:
    # Heartbeat writes stay rare: a lease is rewritten only once under half of it is left.
    async with transaction(pool) as conn:
        fresh = await factories.loop(conn, status="running", lease_in=10, lease_seconds=12)
        due = await factories.loop(conn, status="running", lease_in=5, lease_seconds=12)
    async with connection(pool) as conn:
        kept = await loops.renew_leases(
            conn,
            ids=[fresh.id, due.id, uuid.uuid4()],
            tokens=[fresh.execution_token, due.execution_token, uuid.uuid4()],  # type: ignore[list-item]
        )
        fresh_row = await loops.get(conn, loop_id=fresh.id)
        due_row = await loops.get(conn, loop_id=due.id)
    assert set(kept) == {fresh.id, due.id}  # an unknown lease is not held
    assert fresh_row is not None and fresh_row.lease_expires_at == fresh.lease_expires_at
    assert kept[fresh.id] is not None and 9 < kept[fresh.id] <= 10
    assert due_row is not None and due.lease_expires_at is not None
    assert due_row.lease_expires_at is not None and due_row.lease_expires_at > due.lease_expires_at
    assert kept[due.id] is not None and 11 < kept[due.id] <= 12


async def test_tool_call_leases_are_rewritten_only_when_under_half(pool: Pool) -> None:
    from agentd.store import tool_calls

    async with transaction(pool) as conn:
        row = await factories.loop(conn, status="running", step_count=1)
        fresh_token, due_token = uuid.uuid4(), uuid.uuid4()
        fresh = await factories.tool_call(conn, row, lease_token=fresh_token, leased_in=25)
        due = await factories.tool_call(conn, row, lease_token=due_token, leased_in=10)
    async with connection(pool) as conn:
        kept = await tool_calls.renew_leases(
            conn, ids=[fresh.id, due.id], tokens=[fresh_token, due_token], seconds=[30.0, 30.0]
        )
        rows = {c.id: c for c in await tool_calls.list_for_loop(conn, loop_id=row.id)}
    assert rows[fresh.id].leased_until == fresh.leased_until  # 25 of 30 s left: untouched
    assert kept[fresh.id] is not None and 24 < kept[fresh.id] <= 25
    assert rows[due.id].leased_until is not None and due.leased_until is not None
    assert rows[due.id].leased_until > due.leased_until  # 10 of 30 s left: renewed
    assert kept[due.id] is not None and 29 < kept[due.id] <= 30


async def test_a_lease_the_next_tick_would_find_lapsed_is_renewed_now(pool: Pool) -> None:
    # More than half left, but less than two heartbeat intervals: skipping it now could let
    # it lapse before the next tick.
    async with transaction(pool) as conn:
        row = await factories.loop(conn, status="running", lease_in=20, lease_seconds=30)
    async with connection(pool) as conn:
        kept = await loops.renew_leases(
            conn,
            ids=[row.id],
            tokens=[row.execution_token],  # type: ignore[list-item]
            renew_within=25.0,
        )
    assert kept[row.id] is not None and 29 < kept[row.id] <= 30


async def test_live_leases_are_the_unanswered_calls_leased_into_the_future(pool: Pool) -> None:
    # Unfreeze leaves these running; the comparison is the database's clock, not ours.
    async with transaction(pool) as conn:
        phase = await factories.loop(conn, status="running", step_count=1)
        live = await factories.tool_call(conn, phase, lease_token=uuid.uuid4(), leased_in=30)
        await factories.tool_call(conn, phase, lease_token=uuid.uuid4(), leased_in=-1)
        await factories.tool_call(conn, phase)  # never leased (its job was dropped)
        await factories.tool_call(
            conn, phase, lease_token=uuid.uuid4(), leased_in=30, responded=True
        )
        other = await factories.loop(conn, status="running", step_count=1)
        await factories.tool_call(conn, other, lease_token=uuid.uuid4(), leased_in=30)
    async with connection(pool) as conn:
        assert await tool_calls.live_leases(conn, loop_id=phase.id) == {live.id}

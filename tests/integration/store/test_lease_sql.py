"""Lease SQL on a loop whose turn already finalized (running, in its tool phase, no lease)."""

from __future__ import annotations

import uuid

from agentd.db.pool import Pool, connection, transaction
from agentd.store import jobs, loops
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
    assert kept == {phase.id, turn.id}  # still this generation: not a lost lease
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

"""Freeze and unfreeze: workers leave a frozen loop alone, and unfreezing dispatches again
what they dropped meanwhile — and only that.

While a loop is frozen its claims drop its jobs (store/sql/jobs.sql, functions/claims.sql)
and the reaper skips it, but work already running goes on: a tool call keeps its lease
(the renewer keeps it), and its finish still records the result and enqueues the successor,
which a frozen claim then drops.
Guarantee: on unfreeze, a queued turn or a tool phase with nothing running gets a new
generation and its work enqueued again (Lifecycle.redispatch, as a resume does). A tool
phase in which a call still holds a live lease (by the database's clock) keeps its
generation, so that call's result is recorded and its tool runs once: no lease is revoked,
the loop's pending jobs are replaced by one job each for the runnable calls holding no live
lease, on the current generation (a call awaiting a person is not runnable; sequential,
only the first call).
Tolerates: a job not dropped yet, or being dropped by a claim that read the loop frozen
(deleted, or skipped as locked, and replaced: each call gets one job, which only a claim
reading the loop unfrozen sees; a task's delayed poll is thus made due now); a call whose
lease expires just after the check (the reaper requeues it, the loop being unfrozen).
Never: locks a call before its loop; cancels work in flight (pause and stop do that).
Called by: Lifecycle.freeze and Lifecycle.unfreeze.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from agentd.db.pool import Connection, transaction
from agentd.engine import dispatch
from agentd.states import LoopStatus, TransitionReason
from agentd.store import jobs, loops, tool_calls
from agentd.store.models import Loop

if TYPE_CHECKING:
    from agentd.engine.loop_ops import LoopOps


async def freeze(lc: LoopOps, loop_id: uuid.UUID) -> Loop:
    async with transaction(lc.pool) as conn:
        await lc.locked(conn, loop_id)
        row = await loops.set_flags(conn, loop_id=loop_id, frozen=True)
        assert row is not None
        await lc.record(conn, row, "loop.frozen", TransitionReason.FROZEN_BY_USER)
        return row


async def unfreeze(lc: LoopOps, loop_id: uuid.UUID) -> Loop:
    async with transaction(lc.pool) as conn:
        loop = await lc.locked(conn, loop_id)
        row = await loops.set_flags(conn, loop_id=loop_id, frozen=False)
        assert row is not None
        # Work dropped while frozen (a queued turn, or a tool phase with no turn in
        # flight) is dispatched again; a turn still running keeps its lease.
        tool_phase = (
            loop.status in (LoopStatus.RUNNING, LoopStatus.WAITING)
            and loop.lease_expires_at is None
        )
        if loop.frozen and tool_phase:
            row = await _resume_tool_phase(lc, conn, row)
        elif loop.frozen and loop.status == LoopStatus.QUEUED:
            row = await lc.redispatch(conn, row, TransitionReason.UNFROZEN)
        await lc.record(conn, row, "loop.unfrozen", TransitionReason.UNFROZEN)
        return row


async def _resume_tool_phase(lc: LoopOps, conn: Connection, loop: Loop) -> Loop:
    """The tool phase of a loop just unfrozen (locked by the caller)."""
    live = await tool_calls.live_leases(conn, loop_id=loop.id)
    if not live or loop.execution_token is None:
        return await lc.redispatch(conn, loop, TransitionReason.UNFROZEN)
    # A call still running: its generation stays, so its finish (fenced on it) counts.
    # A call parked on a child loop (no lease) is enqueued as redispatch does: its run
    # re-parks it on a live child, or reads the end of one that ended while frozen.
    unresolved = await tool_calls.list_unresolved(conn, loop_id=loop.id)
    runnable = await lc.runnable(conn, loop, unresolved)
    # Jobs left on this generation would stay valid: replaced, not doubled.
    await jobs.delete_for_loop(conn, loop_id=loop.id)
    await dispatch.enqueue_tools(
        conn,
        None,
        loop_id=loop.id,
        generation=loop.execution_token,
        calls=[c for c in runnable if c.id not in live],
        lease_seconds=None,
        notify=True,
    )
    return loop

"""Enqueueing successors inside the caller's transaction, and waking whoever runs them.

Guarantee: every enqueue happens in the transaction that advances state (invariant 1).
Never: sends NOTIFY for a queue this process consumes (the local wake is free and NOTIFY
serializes commits); other queues get a NOTIFY so another process claims at once.
Called by: pipelines' finalizers, lifecycle, reaper; the worker (hand_back).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable

from agentd import logs
from agentd.db.pool import Connection, connection
from agentd.engine.runtime import Runtime
from agentd.errors import DatabaseError
from agentd.states import JobQueue
from agentd.store import jobs, loops, tool_calls
from agentd.store.models import ToolCall

log = logs.get("agentd.dispatch")


async def enqueue_llm(
    conn: Connection,
    runtime: Runtime | None,
    *,
    loop_id: uuid.UUID,
    generation: uuid.UUID,
    lease_seconds: float | None,
    notify: bool = False,
    first_turn: bool = False,
) -> None:
    """`first_turn`: the loop's first turn (a start), claimed after loops in flight."""
    await jobs.enqueue(
        conn,
        queue=JobQueue.LLM,
        kind="llm_turn",
        loop_id=loop_id,
        generation=generation,
        lease_seconds=lease_seconds,
        first_turn=first_turn,
    )
    if notify or (runtime is not None and JobQueue.LLM not in runtime.consumes):
        await jobs.notify(conn, queue=JobQueue.LLM)


async def enqueue_tools(
    conn: Connection,
    runtime: Runtime | None,
    *,
    loop_id: uuid.UUID,
    generation: uuid.UUID,
    calls: Iterable[ToolCall],
    lease_seconds: float | None,
    notify: bool = False,
) -> int:
    n = 0
    for call in calls:
        await jobs.enqueue(
            conn,
            queue=JobQueue.TOOL,
            kind="tool_call",
            loop_id=loop_id,
            tool_call_id=call.id,
            generation=generation,
            lease_seconds=lease_seconds,
        )
        n += 1
    if n and (notify or (runtime is not None and JobQueue.TOOL not in runtime.consumes)):
        await jobs.notify(conn, queue=JobQueue.TOOL)
    return n


def wake(runtime: Runtime, *queues: str) -> None:
    """After commit: let this process's worker claim what it just enqueued."""
    for q in queues:
        if q in runtime.consumes:
            runtime.wake_local(q)


def hand_back(
    runtime: Runtime, op: Callable[[Connection], Awaitable[None]], *, what: str, loop_id: uuid.UUID
) -> None:
    """Run `op` on a pooled connection in the background. For a job whose finalizer's
    statement may have committed but never returned (it raised or was cancelled): what it
    leased to this worker (chained calls, a chained turn) goes back to the queue at once,
    though the job's own task is being cancelled. If this fails too, the leases expire and
    the reaper requeues."""

    async def run() -> None:
        try:
            async with connection(runtime.pool) as conn:
                await op(conn)
        except DatabaseError as exc:
            log.warning("hand_back.failed", what=what, loop_id=str(loop_id), error=repr(exc))

    task = asyncio.get_running_loop().create_task(run())
    runtime.handing_back.add(task)  # held, or the loop may collect it mid-statement
    task.add_done_callback(runtime.handing_back.discard)


def hand_back_chained(
    runtime: Runtime, queue: str, tokens: Iterable[uuid.UUID], loop_id: uuid.UUID
) -> None:
    """What a chaining write may have leased to this worker (`queue`'s work of `loop_id`,
    on these lease or execution tokens) goes back to the queue (engine/chaining.py)."""
    held = list(tokens)

    async def tools(conn: Connection) -> None:
        await tool_calls.release_own(conn, loop_id=loop_id, tokens=held)

    async def turn(conn: Connection) -> None:
        await loops.release_leases(conn, ids=[loop_id], tokens=held)
        await jobs.notify(conn, queue=JobQueue.LLM)

    if queue == JobQueue.TOOL:
        hand_back(runtime, tools, what="chained tool calls", loop_id=loop_id)
    else:
        hand_back(runtime, turn, what="chained turn", loop_id=loop_id)

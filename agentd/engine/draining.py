"""Phase two of a worker's shutdown: wait the grace period, then cancel and hand work back.

Guarantee: in-flight work gets `shutdown_grace` to finish; what is still running then is
cancelled, and its turns' and calls' leases are released with fresh jobs in one
transaction, so another worker resumes it at once instead of after the lease expires.
Tolerates: a database that is away (the release is logged and skipped: the leases expire
and the reaper requeues).
Never: releases a lease whose token moved on (the release is fenced on the tokens).
Called by: engine.worker (Worker.drain).
"""

from __future__ import annotations

import asyncio
import uuid

from agentd import logs
from agentd.db.pool import connection
from agentd.engine.runtime import Runtime
from agentd.errors import DatabaseError
from agentd.states import JobQueue
from agentd.store import jobs, loops, tool_calls

log = logs.get("agentd.worker")


async def drain(runtime: Runtime, pending: set[asyncio.Task[None]]) -> None:
    grace = runtime.settings.shutdown_grace
    if pending:
        log.info("worker.draining", in_flight=len(pending), grace=grace)
        _, pending = await asyncio.wait(pending, timeout=grace)
    if not pending:
        return
    turns: list[tuple[uuid.UUID, uuid.UUID]] = []
    tools: list[tuple[int, uuid.UUID]] = []
    if runtime.renewer is not None:
        llm_leases, tool_leases = runtime.renewer.in_flight()
        turns = [(x.key, x.token) for x in llm_leases]  # type: ignore[misc]
        tools = [(x.key[1], x.token) for x in tool_leases]  # type: ignore[index]
    for t in pending:
        t.cancel("shutdown")
    await asyncio.wait(pending, timeout=5)
    await release(runtime, turns, tools)


async def release(
    runtime: Runtime,
    turns: list[tuple[uuid.UUID, uuid.UUID]],
    tools: list[tuple[int, uuid.UUID]],
) -> None:
    """Give these turns (loop id, token) and calls (id, lease token) back to the queues."""
    if not turns and not tools:
        return
    try:
        async with connection(runtime.pool) as conn, conn.transaction():
            if turns:
                await loops.release_leases(
                    conn, ids=[t[0] for t in turns], tokens=[t[1] for t in turns]
                )
            if tools:
                await tool_calls.release_leases(
                    conn, ids=[t[0] for t in tools], tokens=[t[1] for t in tools]
                )
            await jobs.notify(conn, queue=JobQueue.LLM)
            await jobs.notify(conn, queue=JobQueue.TOOL)
        log.info("worker.released", turns=len(turns), tool_calls=len(tools))
    except DatabaseError as exc:
        log.warning("worker.release_failed", error=str(exc))

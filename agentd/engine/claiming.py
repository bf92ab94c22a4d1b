"""The worker's claim loops: one per queue, each claiming up to its free slots per call.

Guarantee: never more claims in flight than free slots per queue; one database round trip
claims up to min(free slots, jobs.MAX_CLAIM_BATCH) jobs, each fenced as a single claim
(execution token or lease token, concurrency-key slot, stale jobs dropped, version filter);
loops already in flight are served before loops' first turns (the claim's order). Each
claimed job's task registers its lease with the LeaseRenewer before any work.
Tolerates: stale and duplicate jobs (the claim drops them), a racing claim taking a
concurrency key's last slot (the job stays queued), database outages (the loop backs off
and retries).
Never: holds a pooled connection once the claim returned; polls while its queue is
drained and no wake came.
Called by: engine.worker (Worker.run).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Protocol

from agentd import logs
from agentd.db.pool import connection
from agentd.errors import DatabaseError
from agentd.states import JobQueue
from agentd.store import jobs

if TYPE_CHECKING:
    from agentd.engine.runtime import Runtime
    from agentd.store.models import Loop

log = logs.get("agentd.worker")


class Worker(Protocol):
    """What a claim loop needs of its worker (engine/worker.py's Worker): slots per queue,
    the wake events, and where a claimed job goes."""

    runtime: Runtime
    limits: dict[str, int]
    busy: dict[str, int]
    wakes: dict[str, asyncio.Event]
    drained: dict[str, bool]

    def run_claimed_turn(
        self, loop: Loop, prefetch: jobs.TurnPrefetch | None, *, job_id: int
    ) -> None: ...

    def run_claimed_tool(
        self, claim: jobs.ToolClaim, lease_token: uuid.UUID, *, job_id: int
    ) -> None: ...


async def wait(worker: Worker, queue: JobQueue, stop: asyncio.Event, at_most: float) -> None:
    """Until `queue` is woken, `stop` is set, or `at_most` seconds passed."""
    ev = worker.wakes[queue]
    waiters = {asyncio.ensure_future(ev.wait()), asyncio.ensure_future(stop.wait())}
    try:
        await asyncio.wait(waiters, timeout=at_most, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
    ev.clear()


async def claim_loop(worker: Worker, queue: JobQueue, stop: asyncio.Event) -> None:
    backoff = 0.1
    poll = worker.runtime.settings.poll_interval
    while not stop.is_set():
        free = worker.limits[queue] - worker.busy[queue]
        if free <= 0:
            await wait(worker, queue, stop, poll)
            continue
        try:
            claim = claim_turns if queue == JobQueue.LLM else claim_tools
            seen = await claim(worker, free)
            backoff = 0.1
        except DatabaseError as exc:
            log.warning("worker.claim_failed", queue=queue, error=str(exc), retry_in=backoff)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=backoff)
            backoff = min(backoff * 2, 5.0)
            continue
        if not seen:
            worker.drained[queue] = True
            await wait(worker, queue, stop, poll)
            worker.drained[queue] = False  # woken or polled: look again
        # Jobs seen (run, dropped as stale, or left for a full key): claim again while
        # slots are free; the next claim skips what this one left.


async def claim_turns(worker: Worker, free: int) -> int:
    """Claim up to `free` LLM turns and start each; the number of jobs the claim saw."""
    rt = worker.runtime
    async with connection(rt.pool) as conn:
        claims = await jobs.claim_llm_many(
            conn,
            worker_id=rt.worker_id,
            default_lease=rt.settings.lease_seconds(None),
            limit=free,
            versions=rt.registry.version_ids(),
        )
    for claim in claims:
        if not claim.taken:  # lost a race for its concurrency key's last slot: stays queued
            log.debug("turn.concurrency_key_full", job_id=claim.job_id, loop_id=str(claim.loop_id))
        elif claim.loop is None:
            log.debug("turn.stale_job_dropped", job_id=claim.job_id, loop_id=str(claim.loop_id))
        else:
            worker.run_claimed_turn(claim.loop, claim.prefetch, job_id=claim.job_id)
    return len(claims)


async def claim_tools(worker: Worker, free: int) -> int:
    """Claim up to `free` tool calls and start each; the number of jobs the claim saw."""
    rt = worker.runtime
    async with connection(rt.pool) as conn:
        claims = await jobs.claim_tool_many(
            conn,
            worker_id=rt.worker_id,
            default_lease=rt.tool_lease_seconds(),
            limit=free,
            versions=rt.registry.version_ids(),
        )
    for claim in claims:
        tc = claim.tool_call
        if tc is None or claim.generation is None or tc.lease_token is None:
            log.debug("tool_call.stale_job_dropped", job_id=claim.job_id)
        else:
            worker.run_claimed_tool(claim, tc.lease_token, job_id=claim.job_id)
    return len(claims)

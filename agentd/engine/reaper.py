"""Reaper: heals every stuck state it can reach, fleet-wide, without a leader.

Cases: (1) running LLM turns whose lease expired, (1b) the liveness fast path — turns and
tool calls held by a worker whose heartbeat backend is gone (PostgreSQL frees it within
milliseconds of a kill -9), (2) stalled tool calls and dropped tool enqueues, (3) dropped
continuations (all calls answered, no next turn), (4) loops queued too long or with no
job, (5) orphaned `processing` shells, (6) approval deadlines, (7) queued loops whose
agent version no live worker can run: marked `waiting_for_version` (with an event naming
the version), never failed, rotated or requeued; a worker with the version claims them.
Guarantee: each case is one statement that re-checks its condition under row locks taken
with SKIP LOCKED, rotates the generation and enqueues in the same transaction, so racing
reapers resolve to one and a stale worker can never write afterwards. Every reclaimed turn
and tool call gets a `turn.reclaimed` / `tool_call.reclaimed` event in that transaction,
naming why (so the admin UI and the events API show crash recovery).
Tolerates: any number of reapers at once, including `agentd reap` beside daemons, and any
lifecycle call or finalizer at once (loop first, then calls, both SKIP LOCKED: a sweep
never waits for a loop or a call, so it cannot deadlock with them; agentd/store).
Never: touches paused, frozen or terminal loops, or calls awaiting a person.
Called by: engine.service (liveness every `liveness_interval`, sweep every
`reaper_interval`), `agentd reap`.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any
from uuid import UUID

from agentd import logs
from agentd.db.pool import Pool, transaction
from agentd.engine.ticks import Signal, ticks
from agentd.errors import DatabaseError
from agentd.event_names import EventName
from agentd.settings import Settings
from agentd.states import JobQueue, TransitionReason
from agentd.store import agent_versions, events, jobs, loops, messages, tool_calls, workers
from agentd.store.models import NewEvent

log = logs.get("agentd.reaper")

BATCH = 500
GRACE = 5.0  # seconds a row must sit before "no job" counts as a dropped enqueue


@dataclass
class ReapReport:
    dead_workers: int = 0
    expired_turns: int = 0
    dead_worker_turns: int = 0
    stalled_tool_calls: int = 0
    dead_worker_tool_calls: int = 0
    dropped_continuations: int = 0
    requeued_loops: int = 0
    orphaned_shells: int = 0
    expired_approvals: int = 0
    waiting_for_version: int = 0

    def __bool__(self) -> bool:
        return any(asdict(self).values())

    def as_log(self) -> dict[str, int]:
        return {k: v for k, v in asdict(self).items() if v}


class Reaper:
    def __init__(self, settings: Settings, pool: Pool, *, own_worker: UUID | None = None) -> None:
        self.settings = settings
        self.pool = pool
        # The worker of this reaper's own process is alive by definition: a reaper waking
        # from a scheduler stall longer than the stale limit would otherwise count its own
        # worker dead (its heartbeat row stalled with it) and reclaim its live turns.
        self.own_worker = own_worker
        self.swept = Signal()
        self.checked = Signal()
        self.totals = ReapReport()

    async def liveness_once(self) -> ReapReport:
        """The fast path: dead workers' work, and leases that already expired."""
        report = ReapReport()
        async with transaction(self.pool) as conn:
            dead = [
                w
                for w in await workers.list_dead(conn, stale_seconds=self._stale_after())
                if w != self.own_worker
            ]
            expired = await loops.reap_expired(conn, dead_workers=dead, limit=BATCH)
            for row in expired:
                if row["status_reason"] == TransitionReason.REAPED_WORKER_DEAD:
                    report.dead_worker_turns += 1
                else:
                    report.expired_turns += 1
            stalled = await tool_calls.reap_stalled(
                conn, dead_workers=dead, grace=GRACE, limit=BATCH
            )
            for row in stalled:
                if row["dead_worker"]:
                    report.dead_worker_tool_calls += 1
                else:
                    report.stalled_tool_calls += 1
            if expired or stalled:
                await events.insert_many(conn, _reclaimed(expired, stalled))
            if dead:
                await workers.delete_many(conn, ids=dead)
                report.dead_workers = len(dead)
            if expired:
                await jobs.notify(conn, queue=JobQueue.LLM)
            if stalled:
                await jobs.notify(conn, queue=JobQueue.TOOL)
        self._add(report)
        return report

    async def sweep_once(self) -> ReapReport:
        report = await self.liveness_once()
        async with transaction(self.pool) as conn:
            # Before reap_queued, which leaves the loops marked here alone.
            waiting = await agent_versions.mark_waiting(
                conn, stale_seconds=self._stale_after(), limit=BATCH
            )
            report.waiting_for_version = len(waiting)
            await events.insert_many(conn, [_waiting(r) for r in waiting])
            report.dropped_continuations = await loops.reap_gate(conn, grace=GRACE, limit=BATCH)
            report.requeued_loops = await loops.reap_queued(
                conn, threshold=self.settings.queued_reap_threshold, grace=GRACE, limit=BATCH
            )
            report.orphaned_shells = await messages.reap_orphans(conn, grace=GRACE)
            report.expired_approvals = len(await tool_calls.expire_approvals(conn, limit=BATCH))
            if report.dropped_continuations or report.requeued_loops:
                await jobs.notify(conn, queue=JobQueue.LLM)
            if report.expired_approvals:
                await jobs.notify(conn, queue=JobQueue.TOOL)
            await workers.record_maintenance(conn, name="reaper", report=report.as_log())
        self._add(report, skip_liveness=True)
        return report

    def _stale_after(self) -> float:
        # A worker whose heartbeat row is this old is dead even if its backend lingers
        # (a frozen host, a pooler hiding the backend).
        return max(self.settings.heartbeat_interval * 6, self.settings.lease_margin)

    def _add(self, r: ReapReport, *, skip_liveness: bool = False) -> None:
        for k, v in asdict(r).items():
            if skip_liveness and k in (
                "dead_workers",
                "expired_turns",
                "dead_worker_turns",
                "stalled_tool_calls",
                "dead_worker_tool_calls",
            ):
                continue
            setattr(self.totals, k, getattr(self.totals, k) + v)

    async def run_liveness(self, stop: asyncio.Event) -> None:
        async for _ in ticks(self.settings.liveness_interval, stop, jitter=0.2):
            try:
                report = await self.liveness_once()
            except DatabaseError as exc:
                log.warning("reaper.liveness_failed", error=str(exc))
                continue
            if report:
                log.info("reaper.reclaimed", **report.as_log())
            self.checked.fire()

    async def run(self, stop: asyncio.Event) -> None:
        async for _ in ticks(self.settings.reaper_interval, stop, jitter=0.1):
            try:
                report = await self.sweep_once()
            except DatabaseError as exc:
                log.warning("reaper.sweep_failed", error=str(exc))
                continue
            if report:
                log.info("reaper.swept", **report.as_log())
            self.swept.fire()


_WHY = {
    TransitionReason.REAPED_WORKER_DEAD: "its worker died",
    TransitionReason.REAPED_LEASE_EXPIRED: "its lease expired",
    TransitionReason.REAPED_JOB_LOST: "it had neither a lease nor a job",
}


def _waiting(row: dict[str, Any]) -> NewEvent:
    version = row["version"]
    why = (
        f"agent {row['agent']!r} version {version}: no live worker can run it; the loop "
        "waits (queued) and resumes when a worker with this version starts"
        if version
        else f"agent {row['agent']!r}: no version of it is known to any process yet"
    )
    return NewEvent(
        name=EventName.LOOP_WAITING_FOR_VERSION,
        loop_id=row["id"],
        reason=TransitionReason.WAITING_FOR_VERSION,
        log=why,
    )


def _reclaimed(expired: list[Any], stalled: list[Any]) -> list[NewEvent]:
    out = []
    for row in expired:
        reason = TransitionReason(row["status_reason"])
        out.append(
            NewEvent(
                name=EventName.TURN_RECLAIMED,
                loop_id=row["id"],
                reason=reason,
                log=f"LLM turn reclaimed: {_WHY[reason]}; queued again under a new "
                "generation (the old worker can write nothing)",
            )
        )
    for row in stalled:
        if row["dead_worker"]:
            reason = TransitionReason.REAPED_WORKER_DEAD
        elif row["was_leased"]:
            reason = TransitionReason.REAPED_LEASE_EXPIRED
        else:
            reason = TransitionReason.REAPED_JOB_LOST
        out.append(
            NewEvent(
                name=EventName.TOOL_CALL_RECLAIMED,
                loop_id=row["loop_id"],
                tool_call_id=row["id"],
                reason=reason,
                log=f"tool call {row['id']} reclaimed: {_WHY[reason]}; queued again with "
                f"the same idempotency key (agentd:tool_call:{row['id']})",
            )
        )
    return out

"""Scheduler: starts loops from cron expressions or at a time, once per tick fleet-wide.

Guarantee: a due schedule is claimed with SKIP LOCKED, its loop started and its next run
computed in ONE transaction, so with any number of maintenance workers each tick fires
exactly once. Missed ticks (every worker down) coalesce into one run, then the schedule
moves to its next future tick. Overlap policy when the previous run is still active:
`skip` (count it as skipped), `queue` (run it when the previous one finishes, in order),
`allow` (start anyway).
Tolerates: concurrent schedulers, restarts, schedules edited while running.
Never: starts a run for a disabled schedule.
Called by: engine.service (maintenance queue), api (validation and next-runs listing).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentd import logs
from agentd.db.pool import Connection, Pool, transaction
from agentd.engine.lifecycle import Lifecycle
from agentd.engine.ticks import Signal, ticks
from agentd.errors import AgentdError, ConfigError, DatabaseError
from agentd.event_names import EventName
from agentd.settings import Settings
from agentd.store import events, schedules
from agentd.store.models import NewEvent
from agentd.store.schedules import Schedule

if TYPE_CHECKING:
    from agentd.store.models import Loop

log = logs.get("agentd.scheduler")

BATCH = 100


class ScheduleSpec(BaseModel):
    """A schedule as a user writes it (REST body or `[schedules.NAME]`)."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1)
    message: str = Field(min_length=1)
    cron: str | None = None
    at: datetime | None = None
    timezone: str = "UTC"
    overlap: Literal["skip", "queue", "allow"] = "skip"
    subject: str | None = None
    state: dict[str, Any] = Field(default_factory=dict)
    enabled: bool = True

    @model_validator(mode="after")
    def _when(self) -> ScheduleSpec:
        if (self.cron is None) == (self.at is None):
            raise ValueError("give exactly one of cron or at")
        zone(self.timezone)
        if self.cron is not None:
            next_tick(self.cron, self.timezone, datetime.now(UTC))
        if self.at is not None and self.at.tzinfo is None:
            raise ValueError("at must include a timezone offset (e.g. 2026-12-01T09:00:00Z)")
        return self

    def first_run(self, now: datetime) -> datetime:
        if self.at is not None:
            return self.at
        assert self.cron is not None
        return next_tick(self.cron, self.timezone, now)


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone {name!r}") from None


def next_tick(cron: str, tz: str, after: datetime) -> datetime:
    """The first tick of `cron` (in zone `tz`) strictly after `after`."""
    try:
        it = CronSim(cron, after.astimezone(zone(tz)))
    except CronSimError as exc:
        raise ValueError(f"invalid cron expression {cron!r}: {exc}") from None
    return next(it).astimezone(UTC)


def upcoming(s: Schedule, n: int = 5) -> list[datetime]:
    """The next `n` runs of a schedule (one at most for a one-shot)."""
    if not s.enabled or s.next_run_at is None:
        return []
    out = [s.next_run_at]
    if s.cron:
        while len(out) < n:
            out.append(next_tick(s.cron, s.timezone, out[-1]))
    return out


def parse_spec(name: str, raw: dict[str, Any]) -> ScheduleSpec:
    try:
        return ScheduleSpec.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "schedule"
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(
                f"unknown key {loc!r}" if err["type"] == "extra_forbidden" else f"{loc}: {msg}"
            )
        raise ConfigError(f"[schedules.{name}]: " + "; ".join(problems)) from None


@dataclass
class TickReport:
    started: int = 0
    skipped: int = 0
    queued: int = 0
    failed: int = 0

    def __bool__(self) -> bool:
        return any(asdict(self).values())


class Scheduler:
    def __init__(self, settings: Settings, pool: Pool, lifecycle: Lifecycle) -> None:
        self.settings = settings
        self.pool = pool
        self.lifecycle = lifecycle
        self.ticked = Signal()

    async def sync_config(self, raw: dict[str, dict[str, Any]]) -> None:
        """Upsert `[schedules.*]` from the config file (API-made schedules are left alone)."""
        now = datetime.now(UTC)
        for name, body in raw.items():
            spec = parse_spec(name, body)
            async with transaction(self.pool) as conn:
                await schedules.upsert(
                    conn,
                    name=name,
                    agent=spec.agent,
                    message=spec.message,
                    subject=spec.subject,
                    state=spec.state,
                    cron=spec.cron,
                    timezone=spec.timezone,
                    next_run_at=spec.first_run(now),
                    overlap=spec.overlap,
                    source="config",
                    enabled=spec.enabled,
                )

    async def _start(self, conn: Connection, s: Schedule) -> Loop:
        # A savepoint: a schedule naming a removed agent must not undo the others' runs.
        async with conn.transaction():
            loop = await self.lifecycle.start_in(
                conn,
                agent=s.agent,
                message=s.message,
                subject=s.subject,
                state=s.state,
                title=f"schedule {s.name}",
            )
            await schedules.link_loop(conn, loop_id=loop.id, schedule_id=s.id)
            return loop

    async def tick_once(self) -> TickReport:
        report = TickReport()
        now = datetime.now(UTC)
        async with transaction(self.pool) as conn:
            for s, active in await schedules.claim_due(conn, limit=BATCH):
                nxt = next_tick(s.cron, s.timezone, now) if s.cron else None
                if active and s.overlap == "skip":
                    await schedules.advance(
                        conn, schedule_id=s.id, next_run_at=nxt, started_loop=None, skipped=1
                    )
                    report.skipped += 1
                    continue
                if active and s.overlap == "queue":
                    await schedules.advance(
                        conn, schedule_id=s.id, next_run_at=nxt, started_loop=None, pending_delta=1
                    )
                    report.queued += 1
                    continue
                try:
                    loop = await self._start(conn, s)
                except AgentdError as exc:
                    report.failed += 1
                    await schedules.advance(
                        conn, schedule_id=s.id, next_run_at=nxt, started_loop=None, skipped=1
                    )
                    await events.insert_many(
                        conn,
                        [NewEvent(name=EventName.SCHEDULE_FAILED, reason=s.name, log=exc.message)],
                    )
                    log.warning("schedule.failed", schedule=s.name, error=exc.message)
                    continue
                await schedules.advance(
                    conn, schedule_id=s.id, next_run_at=nxt, started_loop=loop.id
                )
                report.started += 1
            for s in await schedules.claim_pending(conn, limit=BATCH):
                try:
                    loop = await self._start(conn, s)
                except AgentdError as exc:
                    log.warning("schedule.failed", schedule=s.name, error=exc.message)
                    await schedules.advance(
                        conn,
                        schedule_id=s.id,
                        next_run_at=s.next_run_at,
                        started_loop=None,
                        pending_delta=-1,
                        skipped=1,
                    )
                    report.failed += 1
                    continue
                await schedules.advance(
                    conn,
                    schedule_id=s.id,
                    next_run_at=s.next_run_at,
                    started_loop=loop.id,
                    pending_delta=-1,
                )
                report.started += 1
        return report

    async def run(self, stop: asyncio.Event) -> None:
        async for _ in ticks(self.settings.scheduler_interval, stop, jitter=0.1):
            try:
                report = await self.tick_once()
            except DatabaseError as exc:
                log.warning("scheduler.tick_failed", error=str(exc))
                continue
            if report:
                log.info("scheduler.ticked", **asdict(report))
            self.ticked.fire()

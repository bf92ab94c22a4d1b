"""Schedule rows: cron or one-shot loop starts, claimed once per tick fleet-wide.

Guarantee: a due schedule is locked with SKIP LOCKED and advanced in the transaction that
starts its loop, so each tick fires on exactly one process.
Called by: engine.scheduler, api (schedules routes).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from agentd.db.pool import Connection, Record
from agentd.store.models import _Row
from agentd.store.queries import sql


@dataclass(frozen=True)
class Schedule(_Row):
    id: int
    name: str
    agent: str
    message: str
    subject: str | None
    state: dict[str, Any]
    cron: str | None
    timezone: str
    next_run_at: datetime | None
    overlap: str
    enabled: bool
    source: str
    pending_runs: int
    runs: int
    skipped_runs: int
    last_run_at: datetime | None
    last_loop_id: UUID | None
    created_at: datetime
    updated_at: datetime


def _s(rec: Record | None) -> Schedule | None:
    return Schedule.from_record(rec) if rec is not None else None


async def upsert(
    conn: Connection,
    *,
    name: str,
    agent: str,
    message: str,
    subject: str | None,
    state: dict[str, Any],
    cron: str | None,
    timezone: str,
    next_run_at: datetime | None,
    overlap: str,
    source: str,
    enabled: bool = True,
) -> Schedule | None:
    return _s(
        await conn.fetchrow(
            sql("schedule_upsert"),
            name,
            agent,
            message,
            subject,
            state,
            cron,
            timezone,
            next_run_at,
            overlap,
            source,
            enabled,
        )
    )


async def get(conn: Connection, *, name: str) -> Schedule | None:
    return _s(await conn.fetchrow(sql("schedule_get"), name))


async def list_(conn: Connection) -> list[Schedule]:
    return [Schedule.from_record(r) for r in await conn.fetch(sql("schedule_list"))]


async def delete(conn: Connection, *, name: str) -> Schedule | None:
    return _s(await conn.fetchrow(sql("schedule_delete"), name))


async def set_enabled(
    conn: Connection, *, name: str, enabled: bool, next_run_at: datetime | None
) -> Schedule | None:
    return _s(await conn.fetchrow(sql("schedule_set_enabled"), name, enabled, next_run_at))


async def claim_due(conn: Connection, *, limit: int) -> list[tuple[Schedule, bool]]:
    rows = await conn.fetch(sql("schedule_claim_due"), limit)
    return [(Schedule.from_record(r), bool(r["active"])) for r in rows]


async def claim_pending(conn: Connection, *, limit: int) -> list[Schedule]:
    return [Schedule.from_record(r) for r in await conn.fetch(sql("schedule_claim_pending"), limit)]


async def advance(
    conn: Connection,
    *,
    schedule_id: int,
    next_run_at: datetime | None,
    started_loop: UUID | None,
    pending_delta: int = 0,
    skipped: int = 0,
) -> None:
    await conn.execute(
        sql("schedule_advance"), schedule_id, next_run_at, started_loop, pending_delta, skipped
    )


async def link_loop(conn: Connection, *, loop_id: UUID, schedule_id: int) -> None:
    await conn.execute(sql("schedule_link_loop"), loop_id, schedule_id)

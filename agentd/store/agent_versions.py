"""Agent versions (migrations/0025): the definitions recorded, and loops' versions.

Called by: engine.versions (record at start, apply upgrades), engine.reaper
(waiting_for_version), api (GET /v1/agents, upgrades), the lifecycle (start).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from agentd.db.pool import Connection
from agentd.store.models import Loop
from agentd.store.queries import sql


async def record(conn: Connection, *, versions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Insert the versions not yet known; return the ones that were new."""
    rows = await conn.fetch(sql("agent_version_record"), versions)
    return [dict(r) for r in rows]


def _version(row: Any) -> dict[str, Any] | None:
    if row is None:
        return None
    return dict(row)


async def get(conn: Connection, *, version_id: str) -> dict[str, Any] | None:
    return _version(await conn.fetchrow(sql("agent_version_get"), version_id))


async def newest(conn: Connection, *, agent: str) -> dict[str, Any] | None:
    return _version(await conn.fetchrow(sql("agent_version_newest"), agent))


async def list_(conn: Connection, *, stale_seconds: float) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(sql("agent_version_list"), stale_seconds)]


async def live(conn: Connection, *, queue: str, stale_seconds: float) -> set[str]:
    return {r["id"] for r in await conn.fetch(sql("agent_version_live"), queue, stale_seconds)}


async def adopt(conn: Connection, *, agent: str, version_id: str) -> int:
    return int(await conn.fetchval(sql("loop_adopt_version"), agent, version_id))


async def mark_latest(conn: Connection, *, agent: str, version_id: str) -> int:
    return int(await conn.fetchval(sql("loop_mark_latest_upgrades"), agent, version_id))


async def set_upgrade(conn: Connection, *, loop_id: UUID, to_version: str | None, by: str) -> Loop:
    return Loop.from_record(await conn.fetchrow(sql("loop_set_upgrade"), loop_id, to_version, by))


async def apply_upgrade(
    conn: Connection, *, loop_id: UUID, execution_token: UUID
) -> dict[str, Any] | None:
    row = await conn.fetchrow(sql("loop_apply_upgrade"), loop_id, execution_token)
    return dict(row) if row is not None else None


async def mark_waiting(
    conn: Connection, *, stale_seconds: float, limit: int
) -> list[dict[str, Any]]:
    rows = await conn.fetch(sql("loop_mark_waiting_for_version"), stale_seconds, limit)
    return [dict(r) for r in rows]


async def count_waiting(conn: Connection) -> list[tuple[str, str, int]]:
    rows = await conn.fetch(sql("loop_count_waiting_for_version"))
    return [(r["agent"], r["version"], r["n"]) for r in rows]


async def webhook(
    conn: Connection, *, type_: str, loop_id: UUID | None, data: dict[str, Any]
) -> None:
    await conn.execute(sql("agent_version_webhook"), type_, loop_id, data)


async def loops_to_upgrade(
    conn: Connection, *, agent: str, from_version: str | None, to_version: str, limit: int
) -> list[UUID]:
    rows = await conn.fetch(sql("loop_list_for_upgrade"), agent, from_version, to_version, limit)
    return [r["id"] for r in rows]

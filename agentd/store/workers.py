"""Worker registry rows and the fleet-wide maintenance record.

Guarantee: a worker row names the backend of its heartbeat connection, so a dead process
is detected from pg_stat_activity within milliseconds of its death.
Called by: engine (lease renewer, reaper), api (readyz, dashboard).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from agentd.db.pool import Connection
from agentd.store.queries import sql


async def register(
    conn: Connection,
    *,
    worker_id: UUID,
    hostname: str,
    pid: int,
    queues: list[str],
    version: str,
    agent_versions: list[str] | None = None,
) -> None:
    await conn.execute(
        sql("worker_register"), worker_id, hostname, pid, queues, version, agent_versions or []
    )


async def heartbeat(conn: Connection, *, worker_id: UUID) -> bool:
    return bool(await conn.fetchval(sql("worker_heartbeat"), worker_id))


async def set_stopping(conn: Connection, *, worker_id: UUID) -> None:
    await conn.execute(sql("worker_set_stopping"), worker_id)


async def delete(conn: Connection, *, worker_id: UUID) -> None:
    await conn.execute(sql("worker_delete"), worker_id)


async def list_dead(conn: Connection, *, stale_seconds: float) -> list[UUID]:
    return [r["id"] for r in await conn.fetch(sql("worker_list_dead"), stale_seconds)]


async def delete_many(conn: Connection, *, ids: list[UUID]) -> None:
    await conn.execute(sql("worker_delete_many"), ids)


async def list_(conn: Connection) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(sql("worker_list"))]


async def record_maintenance(conn: Connection, *, name: str, report: dict[str, Any]) -> None:
    await conn.execute(sql("maintenance_record"), name, report)


async def list_maintenance(conn: Connection) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(sql("maintenance_list"))]


async def ping(conn: Connection) -> int:
    return int(await conn.fetchval(sql("db_ping")))

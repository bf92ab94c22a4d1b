"""Loop reports: the lists, searches, counts and cost sums the API and the admin read.

Read-only, one statement each; none takes a lock.
Called by: api (GET /v1/loops, /v1/costs, /metrics) and admin (the loop list, the dashboard).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from agentd.db.pool import Connection
from agentd.store.models import Loop
from agentd.store.queries import sql


async def list_(
    conn: Connection,
    *,
    status: str | None,
    agent: str | None,
    cursor: tuple[datetime, UUID] | None,
    limit: int,
    parent_id: UUID | None = None,
) -> list[Loop]:
    c_at, c_id = cursor if cursor else (None, None)
    rows = await conn.fetch(sql("loop_list"), status, agent, c_at, c_id, limit, parent_id)
    return [Loop.from_record(r) for r in rows]


async def count_by_status(conn: Connection) -> list[tuple[str, str, int]]:
    return [
        (r["status"], r["agent"], r["n"]) for r in await conn.fetch(sql("loop_count_by_status"))
    ]


async def search(
    conn: Connection,
    *,
    status: str | None,
    agent: str | None,
    pattern: str,
    id_range: tuple[UUID, UUID] | None,
    cursor: tuple[datetime, UUID] | None,
    limit: int,
) -> list[Loop]:
    """Loops whose subject or title matches `pattern` (ILIKE) or whose id is in `id_range`."""
    lo, hi = id_range if id_range else (None, None)
    c_at, c_id = cursor if cursor else (None, None)
    rows = await conn.fetch(sql("loop_search"), status, agent, pattern, lo, hi, c_at, c_id, limit)
    return [Loop.from_record(r) for r in rows]


async def count_by_status_capped(
    conn: Connection, *, statuses: list[str], cap: int
) -> dict[str, int]:
    """Per-status counts, each stopping at `cap` (a count equal to `cap` means "at least")."""
    rows = await conn.fetch(sql("loop_count_by_status_capped"), statuses, cap)
    return {r["status"]: r["n"] for r in rows}


async def estimate_total(conn: Connection) -> int | None:
    """The planner's estimate of the number of loops, or None before the first ANALYZE."""
    n = await conn.fetchval(sql("loop_estimate_total"))
    return int(n) if n is not None and n >= 0 else None


async def cost_by_agent(
    conn: Connection, *, since: datetime, until: datetime, agent: str | None
) -> list[dict[str, Any]]:
    """Per agent, over the loops created in [since, until): cost (Decimal or None), loops,
    unpriced_turns and the tokens_* sums."""
    rows = await conn.fetch(sql("loop_cost_by_agent"), since, until, agent)
    return [dict(r) for r in rows]

"""Rows in any state, written unfenced: the statements behind agentd.testing.factories.

Guarantee: none; these write states no production path writes directly (an orphaned
shell, a dead worker, a row forced into any status). Called by: agentd.testing only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from agentd.db.pool import Connection, Record
from agentd.store.queries import sql

# The tables `force` may write, and the columns of each it may set.
FORCEABLE = {
    "loops": frozenset(
        {
            "status",
            "status_reason",
            "execution_token",
            "lease_expires_at",
            "lease_seconds",
            "worker_id",
            "turn_started_at",
            "step_count",
            "frozen",
            "observed",
            "error_message",
            "updated_at",
        }
    ),
    "messages": frozenset({"hidden", "status", "updated_at", "execution_token", "step"}),
    "tool_calls": frozenset(
        {
            "status",
            "result",
            "is_success",
            "executed_at",
            "lease_token",
            "leased_until",
            "lease_worker_id",
            "approval_required",
            "approval_status",
            "approval_deadline",
            "response_message_id",
            "updated_at",
        }
    ),
}


async def clock(conn: Connection) -> datetime:
    now: datetime = await conn.fetchval(sql("fixture_clock"))
    return now


async def force(conn: Connection, table: str, key: UUID | int, values: dict[str, Any]) -> Record:
    """Row `key` of `table` with `values` forced onto it (its row as it is, when none)."""
    allowed = FORCEABLE.get(table)
    if allowed is None:
        raise ValueError(f"factories cannot write {table}")
    unknown = set(values) - allowed
    if unknown:
        raise ValueError(f"factories cannot set {sorted(unknown)} on {table}")
    if not values:
        return await conn.fetchrow(f"SELECT * FROM {table} WHERE id = $1", key)
    cols = list(values)
    assignments = ", ".join(f"{c} = ${i + 2}" for i, c in enumerate(cols))
    return await conn.fetchrow(
        f"UPDATE {table} SET {assignments} WHERE id = $1 RETURNING *",
        key,
        *(values[c] for c in cols),
    )


async def shell(conn: Connection, *, loop_id: UUID, step: int, execution_token: UUID) -> Record:
    return await conn.fetchrow(sql("fixture_shell"), loop_id, step, execution_token)


async def visible_assistant(conn: Connection, *, loop_id: UUID, step: int) -> Record | None:
    return await conn.fetchrow(sql("fixture_visible_assistant"), loop_id, step)


async def tool_call_count(conn: Connection, *, message_id: int) -> int:
    return int(await conn.fetchval(sql("fixture_tool_call_count"), message_id))


async def worker(
    conn: Connection, *, worker_id: UUID, queues: list[str], dead: bool, heartbeat_ago: float
) -> None:
    if dead:
        await conn.execute(sql("fixture_worker_dead"), worker_id, queues)
    else:
        await conn.execute(sql("fixture_worker_here"), worker_id, queues, heartbeat_ago)


async def mcp_tools(
    conn: Connection, *, loop_id: UUID, session_id: int, names: dict[str, bool]
) -> None:
    await conn.execute(
        sql("fixture_mcp_tools"), loop_id, session_id, list(names), list(names.values())
    )

"""Event rows: wire logs and transitions, append-only; pruned by the janitor.

Guarantee: one statement per batch. Never: stores an unredacted secret (callers redact;
`insert_many` scrubs again as a last line of defence).
Called by: engine pipelines, lifecycle, the MCP endpoint, janitor.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from agentd import redact
from agentd.db.pool import Connection
from agentd.store.models import Event, NewEvent
from agentd.store.queries import sql


async def insert_many(conn: Connection, events: Sequence[NewEvent]) -> None:
    if not events:
        return
    await conn.execute(sql("event_insert_many"), *columns(events))


def columns(events: Sequence[NewEvent]) -> list[list[object]]:
    """The 13 parallel arrays `event_insert_many` unnests (redacted), for any statement
    that inserts events the same way."""
    cols: list[list[object]] = [[] for _ in range(13)]
    for e in events:
        values = (
            e.loop_id,
            e.name,
            e.reason,
            e.http_method,
            redact.text(e.url) if e.url else None,
            e.status,
            redact.scrub(e.request_data),
            redact.scrub(e.response_data),
            e.duration,
            redact.text(e.log) if e.log else None,
            e.tool_call_id,
            e.message_id,
            e.inbound_session_id,
        )
        for col, v in zip(cols, values, strict=True):
            col.append(v)
    return cols


async def list_(
    conn: Connection, *, loop_id: UUID, after_id: int = 0, limit: int = 100
) -> list[Event]:
    return [
        Event.from_record(r) for r in await conn.fetch(sql("event_list"), loop_id, after_id, limit)
    ]


async def list_named(
    conn: Connection, *, loop_id: UUID, names: Sequence[str], limit: int = 200
) -> list[Event]:
    rows = await conn.fetch(sql("event_list_named"), loop_id, list(names), limit)
    return [Event.from_record(r) for r in rows]


async def prune(conn: Connection, *, cutoff: datetime, batch: int) -> int:
    return int(await conn.fetchval(sql("event_prune"), cutoff, batch))


async def publish(conn: Connection, payload: dict[str, object]) -> None:
    """Notify live observers at commit (payload trimmed to fit NOTIFY's 8000 bytes)."""
    import json

    text = json.dumps(payload, default=str)
    if len(text.encode()) > 7900:
        slim = dict(payload)
        for key in ("content", "reasoning", "delta"):
            if isinstance(slim.get(key), str):
                slim[key] = str(slim[key])[:2000]
                slim["truncated"] = True
        text = json.dumps(slim, default=str)[:7900]
    await conn.execute(sql("event_publish"), text)


async def control(conn: Connection, payload: dict[str, object]) -> None:
    import json

    await conn.execute(sql("event_control"), json.dumps(payload, default=str))


async def activity_per_minute(conn: Connection, *, window: float) -> list[dict[str, object]]:
    """{minute, turns, tool_calls, failures} per minute with any, over the last `window` s."""
    return [dict(r) for r in await conn.fetch(sql("event_activity_per_minute"), window)]


async def failure_reasons(
    conn: Connection, *, window: float, limit: int = 20
) -> list[dict[str, object]]:
    """{reason, n, last_at, last_log, last_loop_id} of loop failures in the last `window` s."""
    return [dict(r) for r in await conn.fetch(sql("event_failure_reasons"), window, limit)]


async def list_for_inbound(
    conn: Connection, *, inbound_session_id: int, after_id: int = 0, limit: int = 100
) -> list[Event]:
    rows = await conn.fetch(sql("event_list_for_inbound"), inbound_session_id, after_id, limit)
    return [Event.from_record(r) for r in rows]


async def publish_many(conn: Connection, payloads: list[str]) -> None:
    if payloads:
        await conn.execute(sql("event_publish_many"), payloads)

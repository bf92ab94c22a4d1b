"""Message rows: user and tool messages, streaming shells, canonical assistant messages.

Guarantee: at most one visible assistant message per (loop, step) and one tool message per
tool call (unique indexes); a shell becomes canonical only inside the fenced finalize.
Tolerates: duplicate finalizers (the second inserts nothing).
Never: shows a processing shell as history.
Called by: engine (pipelines, lifecycle, reaper), api (transcript).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from agentd.db.pool import Connection
from agentd.store.models import Message
from agentd.store.queries import sql


async def insert(
    conn: Connection,
    *,
    loop_id: UUID,
    role: str,
    content: str | None,
    reasoning: str | None = None,
    step: int | None = None,
    execution_token: UUID | None = None,
    tool_call_id: int | None = None,
    metadata: dict[str, Any] | None = None,
    tokens: tuple[int | None, int | None, int | None] = (None, None, None),
    ttft: float | None = None,
    duration: float | None = None,
    finish_reason: str | None = None,
) -> Message:
    rec = await conn.fetchrow(
        sql("message_insert"),
        loop_id,
        role,
        content,
        reasoning,
        step,
        execution_token,
        tool_call_id,
        metadata,
        *tokens,
        ttft,
        duration,
        finish_reason,
    )
    return Message.from_record(rec)


async def insert_tool_result(
    conn: Connection, *, loop_id: UUID, content: str, tool_call_id: int, metadata: dict[str, Any]
) -> Message | None:
    rec = await conn.fetchrow(
        sql("message_insert_tool_result"), loop_id, content, tool_call_id, metadata
    )
    return Message.from_record(rec) if rec else None


async def insert_shell(
    conn: Connection, *, loop_id: UUID, step: int, execution_token: UUID
) -> Message:
    return Message.from_record(
        await conn.fetchrow(sql("message_insert_shell"), loop_id, step, execution_token)
    )


async def update_partial(
    conn: Connection, *, message_id: int, content: str, reasoning: str | None, execution_token: UUID
) -> None:
    await conn.execute(
        sql("message_update_partial"), message_id, content, reasoning, execution_token
    )


async def promote_shell(
    conn: Connection,
    *,
    message_id: int,
    content: str,
    reasoning: str | None,
    metadata: dict[str, Any],
    tokens: tuple[int | None, int | None, int | None],
    ttft: float | None,
    duration: float | None,
    finish_reason: str | None,
    step: int,
) -> Message | None:
    rec = await conn.fetchrow(
        sql("message_promote_shell"),
        message_id,
        content,
        reasoning,
        metadata,
        *tokens,
        ttft,
        duration,
        finish_reason,
        step,
    )
    return Message.from_record(rec) if rec else None


async def fail_shells(conn: Connection, *, loop_id: UUID) -> None:
    await conn.execute(sql("message_fail_shells"), loop_id)


async def reap_orphans(conn: Connection, *, grace: float) -> int:
    return int(await conn.fetchval(sql("message_reap_orphans"), grace))


async def list_(conn: Connection, *, loop_id: UUID, include_hidden: bool = False) -> list[Message]:
    return [
        Message.from_record(r)
        for r in await conn.fetch(sql("message_list"), loop_id, include_hidden)
    ]


async def list_after(conn: Connection, *, loop_id: UUID, after_id: int) -> list[Message]:
    return [
        Message.from_record(r)
        for r in await conn.fetch(sql("message_list_after"), loop_id, after_id)
    ]

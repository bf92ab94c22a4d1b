"""Message rows: user and tool messages, streaming shells, canonical assistant messages.

Guarantee: at most one visible assistant message per (loop, step) and one tool message per
tool call (unique indexes); a shell becomes canonical only inside the fenced finalize.
Tolerates: duplicate finalizers (the second inserts nothing).
Never: shows a processing shell as history.
Called by: engine (pipelines, lifecycle, reaper), api (transcript).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from agentd import redact
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
    tokens_estimated: bool = False,
    summary_through: int | None = None,
) -> Message:
    rec = await conn.fetchrow(
        sql("message_insert"),
        loop_id,
        role,
        redact.transcript(content),  # the transcript never holds a known secret
        redact.transcript(reasoning),
        step,
        execution_token,
        tool_call_id,
        redact.transcript(metadata),
        *tokens,
        ttft,
        duration,
        finish_reason,
        tokens_estimated,
        summary_through,
    )
    return Message.from_record(rec)


async def insert_tool_result(
    conn: Connection, *, loop_id: UUID, content: str, tool_call_id: int, metadata: dict[str, Any]
) -> Message | None:
    rec = await conn.fetchrow(
        sql("message_insert_tool_result"),
        loop_id,
        redact.transcript(content),
        tool_call_id,
        redact.transcript(metadata),
    )
    return Message.from_record(rec) if rec else None


async def insert_shell(
    conn: Connection, *, loop_id: UUID, step: int, execution_token: UUID
) -> Message | None:
    """The streaming shell; None when the turn's fence is lost (nothing written)."""
    rec = await conn.fetchrow(sql("message_insert_shell"), loop_id, step, execution_token)
    return Message.from_record(rec) if rec is not None else None


async def update_partial(
    conn: Connection, *, message_id: int, content: str, reasoning: str | None, execution_token: UUID
) -> None:
    await conn.execute(
        sql("message_update_partial"), message_id, content, reasoning, execution_token
    )


async def fail_shells(conn: Connection, *, loop_id: UUID) -> None:
    await conn.execute(sql("message_fail_shells"), loop_id)


async def reap_orphans(conn: Connection, *, grace: float) -> int:
    return int(await conn.fetchval(sql("message_reap_orphans"), grace))


async def streaming_shell(conn: Connection, *, loop_id: UUID) -> Message | None:
    """The newest shell of the loop still being streamed into (hidden, processing)."""
    row = await conn.fetchrow(sql("message_streaming_shell"), loop_id)
    return Message.from_record(row) if row is not None else None


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


async def get(conn: Connection, *, message_id: int) -> Message | None:
    rec = await conn.fetchrow(sql("message_get"), message_id)
    return Message.from_record(rec) if rec else None


async def supersede_after(conn: Connection, *, loop_id: UUID, after_id: int) -> int:
    """Take every visible row after `after_id` off the prompt (its own results stay)."""
    return int(await conn.fetchval(sql("message_supersede_after"), loop_id, after_id))


@dataclass(frozen=True)
class ForkCopy:
    messages: int
    tool_calls: int
    max_step: int


async def copy_for_fork(
    conn: Connection, *, source_loop_id: UUID, new_loop_id: UUID, at_message_id: int
) -> ForkCopy:
    """Copy the history up to and including `at_message_id` into `new_loop_id`, linked."""
    rec = await conn.fetchrow(
        sql("message_copy_for_fork"), source_loop_id, new_loop_id, at_message_id
    )
    await conn.execute(sql("message_relink_fork"), new_loop_id)
    return ForkCopy(
        messages=rec["messages"], tool_calls=rec["tool_calls"], max_step=rec["max_step"]
    )


async def update_partial_many(
    conn: Connection,
    *,
    ids: list[int],
    contents: list[str],
    reasonings: list[str | None],
    tokens: list[UUID],
) -> dict[int, bool]:
    """Write the partials still fenced; {shell id: its loop is observed} for those written."""
    rows = await conn.fetch(sql("message_update_partial_many"), ids, contents, reasonings, tokens)
    return {int(r["id"]): bool(r["observed"]) for r in rows}


async def cost_by_model(
    conn: Connection, *, since: datetime, until: datetime, agent: str | None
) -> list[dict[str, Any]]:
    """Per (agent, model): cost (Decimal or None), turns, unpriced_turns."""
    rows = await conn.fetch(sql("message_cost_by_model"), since, until, agent)
    return [dict(r) for r in rows]


async def final_answer(conn: Connection, *, loop_id: UUID) -> str | None:
    """The loop's last visible, completed assistant message (a child's answer)."""
    value = await conn.fetchval(sql("message_final_answer"), loop_id)
    return str(value) if value is not None else None

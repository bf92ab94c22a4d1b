"""Loop inputs: the messages sent to a loop (POST /v1/loops/{id}/messages), pending until a
turn boundary applies them (0027).

Guarantee: a sent message is one row, applied at most once, as one user message, in the
order of sending; `loops.steer_pending` counts the pending rows (both change only under the
loop's row lock), so the finalize of a run's last turn sees every send that committed.
Tolerates: two sends with one Idempotency-Key (the unique key; the caller holds the loop
lock, so the second finds the first's row); a crash between send and apply (the row stays
pending, the next turn or send applies it).
Never: applies an input without the loop's lock held by an earlier statement.
Called by: engine.lifecycle (send), engine.steering (a turn's start), api (listing).
"""

from __future__ import annotations

from uuid import UUID

from agentd.db.pool import Connection
from agentd.store.models import LoopInput
from agentd.store.queries import sql


async def get_by_key(conn: Connection, *, loop_id: UUID, key: str) -> LoopInput | None:
    rec = await conn.fetchrow(sql("loop_input_get_by_key"), loop_id, key)
    return LoopInput.from_record(rec) if rec is not None else None


async def insert(
    conn: Connection,
    *,
    loop_id: UUID,
    mode: str,
    content: str,
    idempotency_key: str | None = None,
    request_hash: bytes | None = None,
    sent_by: str | None = None,
) -> LoopInput:
    rec = await conn.fetchrow(
        sql("loop_input_insert"), loop_id, mode, content, idempotency_key, request_hash, sent_by
    )
    return LoopInput.from_record(rec)


async def apply(conn: Connection, *, loop_id: UUID, everything: bool) -> list[LoopInput]:
    """The inputs this call turned into messages (each with its message_id), in order."""
    rows = await conn.fetch(sql("loop_input_apply"), loop_id, everything)
    return [LoopInput.from_record(r) for r in rows]


async def list_(conn: Connection, *, loop_id: UUID, pending_only: bool = False) -> list[LoopInput]:
    rows = await conn.fetch(sql("loop_input_list"), loop_id, pending_only)
    return [LoopInput.from_record(r) for r in rows]

"""Steering: messages sent to a running loop become user messages at a turn boundary.

A send (Lifecycle.send) stores the message pending (store/loop_inputs.py). This module
applies the ones due when a turn starts: `inject` ones (and the `queue` ones sent before
them), or all of them when the run had ended with some pending (the finalize then left the
loop queued with `steer_release` set instead of completing it). The model sees them on the
turn's call.
Guarantee: an input is applied once, under the loop's row lock and this turn's fence, in
the transaction that records its `loop.message_applied` event; nothing is applied by a turn
that lost its generation.
Tolerates: a crash before the apply commits (the input stays pending; the turn that
replaces this one applies it) or after (the messages are history; the next turn reads them).
Never: holds the connection beyond the two statements; applies `queue` inputs mid-run.
Called by: engine.worker (a turn's start, before its prompt is built), engine.lifecycle.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence

from agentd.db.pool import Connection, Pool, transaction
from agentd.event_names import EventName
from agentd.store import events, loop_inputs, loops
from agentd.store.models import LoopInput, NewEvent


async def apply_due(pool: Pool, *, loop_id: uuid.UUID, execution_token: uuid.UUID) -> int | None:
    """Apply the inputs due at this turn's start: how many (None: the fence is lost)."""
    async with transaction(pool) as conn:
        if not await loops.lock_turn(conn, loop_id=loop_id, execution_token=execution_token):
            return None
        applied = await loop_inputs.apply(conn, loop_id=loop_id, everything=False)
        await record_applied(conn, loop_id, applied)
    return len(applied)


async def record_applied(
    conn: Connection, loop_id: uuid.UUID, applied: Sequence[LoopInput]
) -> None:
    """The events of applied inputs, and the stream's notice (at commit) of their messages."""
    if not applied:
        return
    await events.insert_many(
        conn,
        [
            NewEvent(
                name=EventName.LOOP_MESSAGE_APPLIED,
                loop_id=loop_id,
                reason=i.mode,
                message_id=i.message_id,
                log=json.dumps({"input_id": i.id, "mode": i.mode}),
            )
            for i in applied
        ],
    )
    await events.publish(
        conn,
        {
            "type": "message",
            "loop_id": str(loop_id),
            "message_id": applied[-1].message_id,
            "role": "user",
        },
    )

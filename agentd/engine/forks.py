"""Fork and regenerate: the message a person points at, checked, and the fork's copy.

Guarantee: a fork is a new paused loop holding copies of the source's prompt history up to
and including the message (tool calls and their results with it, in order), recording
`forked_from_loop_id` and `forked_from_message_id`; the source loop is read in one
snapshot and never locked or written.
Tolerates: a source loop that keeps running while it is forked.
Never: copies hidden shells or superseded messages; copies a lease.
Called by: Lifecycle.fork and Lifecycle.regenerate (`regenerate` runs the whole transition).
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING

from agentd.db.pool import Connection, transaction
from agentd.errors import BadRequest, NotFound
from agentd.event_names import EventName
from agentd.states import ACTIVE, TransitionReason
from agentd.store import events, loops, messages, tool_calls
from agentd.store.models import Loop, Message, NewEvent

if TYPE_CHECKING:
    from agentd.engine.loop_ops import LoopOps


async def message_of(conn: Connection, loop: Loop, message_id: int) -> Message:
    """The loop's message `message_id`, if it is on the record and in the prompt."""
    msg = await messages.get(conn, message_id=message_id)
    if msg is None or msg.loop_id != loop.id or msg.hidden:
        raise NotFound(f"loop {loop.id} has no message {message_id}")
    if msg.superseded_at is not None:
        raise BadRequest(
            f"message {message_id} was superseded by a regenerate; pick a message in the "
            "current history"
        )
    return msg


async def check_regenerate_from(conn: Connection, loop: Loop, msg: Message) -> None:
    """Regenerating after a final assistant answer would ask the model to talk to itself."""
    if msg.role != "assistant":
        return
    calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
    if not any(c.message_id == msg.id for c in calls):
        raise BadRequest(
            f"message {msg.id} is an assistant answer with no tool calls; to regenerate "
            "it, regenerate from the message before it"
        )


async def fork_in(
    conn: Connection, *, source: Loop, message_id: int, title: str | None = None
) -> Loop:
    at = await message_of(conn, source, message_id)
    name = source.title or source.subject or f"loop {str(source.id)[:8]}"
    new = await loops.insert_fork(
        conn,
        agent=source.agent,
        subject=source.subject,
        state=source.state if isinstance(source.state, dict) else {},
        title=title or f"Fork of {name} at message {at.id}",
        forked_from_loop_id=source.id,
        forked_from_message_id=at.id,
    )
    copied = await messages.copy_for_fork(
        conn, source_loop_id=source.id, new_loop_id=new.id, at_message_id=at.id
    )
    if copied.max_step:
        # Later turns number their steps after the copied ones (one assistant per step).
        new = await loops.set_step_count(conn, loop_id=new.id, step_count=copied.max_step)
    await events.insert_many(
        conn,
        [
            NewEvent(
                name=EventName.LOOP_FORKED,
                loop_id=new.id,
                message_id=None,
                reason=TransitionReason.FORKED,
                log=json.dumps(
                    {
                        "forked_from_loop_id": str(source.id),
                        "forked_from_message_id": at.id,
                        "messages": copied.messages,
                        "tool_calls": copied.tool_calls,
                    }
                ),
            )
        ],
    )
    return new


async def regenerate(lc: LoopOps, loop_id: uuid.UUID, message_id: int) -> Loop:
    """Re-run the loop from just after `message_id`; later messages are superseded.

    They leave the prompt but stay on record. A running loop is revoked first, as pause
    does (token rotated, in-flight work cancelled by NOTIFY), then re-dispatched.
    """
    async with transaction(lc.pool) as conn:
        loop = await lc.locked(conn, loop_id)
        msg = await message_of(conn, loop, message_id)
        await check_regenerate_from(conn, loop, msg)
        if loop.status in ACTIVE:
            await lc.cancel_in_flight(conn, loop, "regenerate", only_generation=True)
        await tool_calls.revoke_leases(conn, loop_id=loop.id)
        superseded = await messages.supersede_after(conn, loop_id=loop.id, after_id=msg.id)
        cancelled = await tool_calls.cancel_superseded(conn, loop_id=loop.id)
        row = await lc.redispatch(conn, loop, TransitionReason.REGENERATED)
        await lc.record(
            conn,
            row,
            "loop.regenerated",
            TransitionReason.REGENERATED,
            json.dumps(
                {"from_message_id": msg.id, "superseded": superseded, "cancelled": cancelled}
            ),
        )
        return row

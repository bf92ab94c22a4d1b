"""Sending a user message to a loop in any state (Lifecycle.send, docs/api.md "Steering").

At rest the message is applied at once and the loop continues; running or waiting, a
`queue` or `inject` message waits as a pending input (engine/steering.py applies it) and an
`interrupt` revokes the turn in flight, answers the calls it leaves, and continues.
Guarantee: one pending input per accepted send, recorded with its event under the loop's
row lock; a retry with the same Idempotency-Key answers with the first send.
Tolerates: a send racing a turn's finalize (steer_pending is read on the row it updates),
pause, stop, approvals and worker crashes (the input stays pending until a turn applies it).
Never: applies a `queue` message mid-run; locks anything before the loop.
Called by: Lifecycle.send and Lifecycle.append_message.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentd.db.pool import Connection, transaction
from agentd.engine import cascade, steering
from agentd.errors import BadRequest, IdempotencyKeyReused, InvalidTransition
from agentd.states import ACTIVE, InputMode, TransitionReason
from agentd.store import events, loop_inputs, loops, tool_calls
from agentd.store.models import Loop, LoopInput, NewEvent

if TYPE_CHECKING:
    from agentd.engine.loop_ops import LoopOps

#: The result of a tool call an interrupt cancelled before it ran (what the model sees).
INTERRUPTED_RESULT = "interrupted: the user sent a new message before this call finished"


@dataclass(frozen=True)
class Sent:
    """A message sent to a loop: the loop after the send, and the input as it is now."""

    loop: Loop
    input: LoopInput
    replayed: bool


async def append_message(lc: LoopOps, loop_id: uuid.UUID, content: str) -> Loop:
    """Add a user message to a loop at rest and continue it with a new turn."""
    if not isinstance(content, str) or not content.strip():
        raise BadRequest("content must be a non-empty string")
    async with transaction(lc.pool) as conn:
        loop = await lc.locked(conn, loop_id)
        if loop.status in ACTIVE:
            raise InvalidTransition(
                f"loop {loop_id} is {loop.status}; wait for it to finish or pause it first",
                current_status=loop.status,
            )
        sent = await send_in(lc, conn, loop, content, InputMode.QUEUE, None, None, None)
        return sent.loop


async def send(
    lc: LoopOps,
    loop_id: uuid.UUID,
    content: str,
    *,
    mode: str | None = None,
    idempotency_key: str | None = None,
    request_hash: bytes | None = None,
    sent_by: str | None = None,
) -> Sent:
    """Send a user message to a loop in any state (docs/api.md, Steering).

    At rest (completed, failed, paused, stopped): added now, and the loop continues.
    Running, waiting or queued: `queue` (the default) waits for the run to end, then the
    loop continues with it; `inject` is added when the next turn starts (after the
    current LLM call, or its tool calls, commit); `interrupt` cancels the turn in flight
    (the stream is cut, unfinished tool calls are cancelled and answered "interrupted"),
    is added now, and a new turn starts. A retry with the same `idempotency_key` answers
    with the first send (`replayed`); another request with the key is refused.
    """
    if not isinstance(content, str) or not content.strip():
        raise BadRequest("content must be a non-empty string")
    wanted = InputMode(mode) if mode is not None else InputMode.QUEUE
    async with transaction(lc.pool) as conn:
        loop = await lc.locked(conn, loop_id)
        if idempotency_key is not None:
            found = await loop_inputs.get_by_key(conn, loop_id=loop.id, key=idempotency_key)
            if found is not None:
                if request_hash is not None and found.request_hash != request_hash:
                    raise IdempotencyKeyReused(
                        f"Idempotency-Key {idempotency_key!r} was used with a different "
                        f"request (input {found.id} of loop {loop.id})",
                        input_id=found.id,
                    )
                return Sent(loop=loop, input=found, replayed=True)
        return await send_in(
            lc, conn, loop, content, wanted, idempotency_key, request_hash, sent_by
        )


async def send_in(
    lc: LoopOps,
    conn: Connection,
    loop: Loop,
    content: str,
    mode: InputMode,
    idempotency_key: str | None,
    request_hash: bytes | None,
    sent_by: str | None,
) -> Sent:
    sent = await loop_inputs.insert(
        conn,
        loop_id=loop.id,
        mode=mode,
        content=content,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        sent_by=sent_by,
    )
    await events.insert_many(
        conn,
        [
            NewEvent(
                name="loop.message_received",
                loop_id=loop.id,
                reason=mode,
                log=json.dumps({"input_id": sent.id, "mode": mode, "status": loop.status}),
            )
        ],
    )
    await events.publish(
        conn,
        {"type": "sent", "loop_id": str(loop.id), "input_id": sent.id, "mode": mode},
    )
    at_rest = loop.status not in ACTIVE
    if not at_rest and mode != InputMode.INTERRUPT:
        row = await loops.get(conn, loop_id=loop.id)
        assert row is not None
        return Sent(loop=row, input=sent, replayed=False)
    if not at_rest:
        # Interrupt: revoke the turn in flight (its worker cancels it and writes nothing;
        # a running tool call's MCP request is cancelled), answer the calls the model is
        # waiting on, then go on with the messages, in the order they were sent.
        await lc.cancel_in_flight(conn, loop, "interrupt", only_generation=True)
        answered = await tool_calls.interrupt_unresolved(
            conn, loop_id=loop.id, text=INTERRUPTED_RESULT
        )
        # A child loop whose call was just answered "interrupted" works for no one now.
        await cascade.stop_children_of(lc, conn, answered)
    applied = await loop_inputs.apply(conn, loop_id=loop.id, everything=True)
    await steering.record_applied(conn, loop.id, applied)
    await tool_calls.revoke_leases(conn, loop_id=loop.id)
    reason = TransitionReason.CONTINUED if at_rest else TransitionReason.INTERRUPTED
    row = await lc.redispatch(conn, loop, reason)
    await lc.record(conn, row, "loop.continued" if at_rest else "loop.interrupted", reason)
    mine = next((i for i in applied if i.id == sent.id), sent)
    return Sent(loop=row, input=mine, replayed=False)

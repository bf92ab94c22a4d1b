"""Starting a loop: its row, its first message and its first turn, in one transaction.

Guarantee: the loop, its first user message (or sent input, for an AG-UI thread), its
concurrency key and its first LLM job commit together, or none of them; the loop runs the
agent version this process loaded (else the newest the fleet recorded).
Tolerates: a concurrent start of the same AG-UI thread (Conflict, nothing written).
Never: writes anything for an unknown agent or a bad message, state or concurrency key.
Called by: Lifecycle.start / start_in (api, scheduler, AG-UI, child loops).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from agentd import logs
from agentd.db.pool import Connection
from agentd.engine import dispatch, loop_state
from agentd.errors import BadRequest, Conflict
from agentd.states import InputMode, TransitionReason
from agentd.store import agent_versions, events, loop_inputs, loops, messages
from agentd.store.models import Loop, NewEvent

if TYPE_CHECKING:
    from agentd.engine.loop_ops import LoopOps

_log = logs.get("agentd.loop")


async def start_in(
    lc: LoopOps,
    conn: Connection,
    *,
    agent: str,
    message: str,
    subject: str | None = None,
    state: dict[str, Any] | None = None,
    title: str | None = None,
    observe: bool = False,
    concurrency_key: str | None = None,
    concurrency_limit: int | None = None,
    loop_id: uuid.UUID | None = None,
    message_key: str | None = None,
) -> Loop:
    """Start a loop inside the caller's transaction (the scheduler's tick uses this).

    `loop_id`: the new loop's id (an AG-UI thread's; Conflict if it exists).
    `message_key`: the first message is recorded as a sent message with this
    idempotency key, so sending it again later adds nothing (api/agui.py)."""
    # The loop runs the version this process loaded; an agent it has no definition of
    # runs the newest version the fleet recorded (its workers have it); neither:
    # UnknownAgent before anything is written.
    if agent in lc.registry:
        cls = lc.registry.get(agent)
        version = lc.registry.version_of(agent)
        agent_key, agent_limit = cls.concurrency_key, cls.concurrency_limit
    else:
        known = await agent_versions.newest(conn, agent=agent)
        if known is None:
            lc.registry.get(agent)  # raises, naming the agents known here
            raise AssertionError("unreachable")
        version = known["id"]
        limits = known["definition"].get("limits") or {}
        agent_key, agent_limit = limits.get("concurrency_key"), limits.get("concurrency_limit")
    if not isinstance(message, str) or not message.strip():
        raise BadRequest("message must be a non-empty string")
    key, limit = concurrency(agent_key, agent_limit, concurrency_key, concurrency_limit)
    loop_state.check_size(state or {}, lc.settings.max_state_bytes)
    token = uuid.uuid4()
    if loop_id is None:
        loop = await loops.insert(
            conn,
            agent=agent,
            subject=subject,
            state=state or {},
            execution_token=token,
            title=title,
            observed=observe,
            agent_version=version,
        )
    else:
        made = await loops.insert_with_id(
            conn,
            loop_id=loop_id,
            agent=agent,
            subject=subject,
            state=state or {},
            execution_token=token,
            title=title,
            observed=observe,
            agent_version=version,
        )
        if made is None:
            raise Conflict(f"a loop {loop_id} exists already")
        loop = made
    if key is not None and limit is not None:
        # Before the job is claimable: the claim must see the key with the job.
        loop = await loops.set_concurrency(conn, loop_id=loop.id, key=key, limit=limit) or loop
    if message_key is None:
        await messages.insert(conn, loop_id=loop.id, role="user", content=message)
    else:
        await loop_inputs.insert(
            conn,
            loop_id=loop.id,
            mode=InputMode.QUEUE,
            content=message,
            idempotency_key=message_key,
        )
        await loop_inputs.apply(conn, loop_id=loop.id, everything=True)
    await dispatch.enqueue_llm(
        conn,
        None,
        loop_id=loop.id,
        generation=token,
        lease_seconds=lc.lease_for(agent),
        notify=True,
        first_turn=True,
    )
    await events.insert_many(
        conn,
        [NewEvent(name="loop.started", loop_id=loop.id, reason=TransitionReason.STARTED)],
    )
    # Start and end of every loop at info: "follow a loop by loop_id" (observability.md).
    _log.info("loop.started", loop_id=str(loop.id), agent=agent)
    return loop


def concurrency(
    agent_key: object, agent_limit: object, key: str | None, limit: int | None
) -> tuple[str | None, int | None]:
    """A start's concurrency key and limit: the request's, else the agent's attributes."""
    if key is None and limit is not None:
        raise BadRequest("concurrency_limit needs a concurrency_key")
    agent_key = agent_key if isinstance(agent_key, str) else None
    agent_limit = (
        agent_limit if isinstance(agent_limit, int) and not isinstance(agent_limit, bool) else None
    )
    key = key if key is not None else agent_key
    limit = limit if limit is not None else agent_limit
    if key is None:
        return None, None
    if not key.strip():
        raise BadRequest("concurrency_key must be a non-empty string")
    if limit is None or isinstance(limit, bool) or limit < 1:
        raise BadRequest(f"concurrency key {key!r} needs a concurrency_limit >= 1")
    return key, limit

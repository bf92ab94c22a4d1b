"""Loop lifecycle: start, continue, pause, resume, stop, freeze, observe, approve/deny,
regenerate and fork (sends: engine/sending.py; decisions: engine/decisions.py; regenerate
and fork: engine/forks.py; freeze and unfreeze: engine/freezing.py; child loops follow
pause, stop and resume: engine/cascade.py).

Guarantee: each transition happens in one transaction under the loop's row lock, enqueues
what it makes runnable in that transaction, rotates or clears the execution token so a
stale worker cannot write, and tells workers (NOTIFY) to cancel in-flight work it revokes.
Tolerates: concurrent calls on the same loop (they serialize on the row lock), a worker
finishing a turn at the same instant (its fence fails or ours sees the new status).
Never: holds a connection across anything but SQL; locks a tool call (or anything else)
before its loop — the loop row first, always (agentd/store/__init__.py: the lock order).
Called by: api routes, the CLI, the demo, tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from agentd import logs
from agentd.db.pool import Connection, Pool, transaction
from agentd.engine import (
    cascade,
    decisions,
    dispatch,
    forks,
    freezing,
    loop_limits,
    sending,
    starting,
)
from agentd.errors import BadRequest, InvalidTransition, LoopNotFound
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.states import ACTIVE, RESUMABLE, LoopStatus, TransitionReason
from agentd.store import agent_versions, events, jobs, loops, messages, tool_calls
from agentd.store.models import Loop, NewEvent, ToolCall

#: Re-exported: what a send answers with (engine/sending.py).
Sent = sending.Sent

DEFAULT_RESUME_FROM = frozenset(
    {LoopStatus.INIT, LoopStatus.PAUSED, LoopStatus.FAILED, LoopStatus.STOPPED}
)

#: `log` is a parameter name below (an event's log text).
_log = logs.get("agentd.loop")


class Lifecycle:
    """Transitions a person or a program asks for (the engine's own live in pipelines)."""

    def __init__(self, pool: Pool, registry: AgentRegistry, settings: Settings) -> None:
        self.pool = pool
        self.registry = registry
        self.settings = settings

    # --- helpers ----------------------------------------------------------------------

    def lease_for(self, agent: str) -> float:
        # An agent this process has no definition of (its workers have): the default.
        cls = self.registry.get(agent) if agent in self.registry else None
        rt = cls.read_timeout if cls and isinstance(cls.read_timeout, int | float) else None
        return self.settings.lease_seconds(rt)

    def _sequential(self, agent: str) -> bool:
        cls = self.registry.get(agent) if agent in self.registry else None
        return bool(cls and cls.sequential_tool_calls is True)

    async def _sequential_for(self, conn: Connection, loop: Loop) -> bool:
        """Whether the loop's own agent version runs one call at a time (this process may
        have another version of the agent, or none)."""
        mine = self.registry.version_of(loop.agent)
        if loop.agent_version is None or loop.agent_version == mine:
            return self._sequential(loop.agent)
        row = await agent_versions.get(conn, version_id=loop.agent_version)
        return bool(row and row["definition"].get("sequential_tool_calls") is True)

    async def runnable(
        self, conn: Connection, loop: Loop, unresolved: list[ToolCall]
    ) -> list[ToolCall]:
        """Of the loop's unanswered calls, those a dispatch may run: none awaiting a person
        and, for a sequential agent, only the first."""
        if await self._sequential_for(conn, loop):
            unresolved = unresolved[:1]
        return [c for c in unresolved if not decisions.awaiting_person(c)]

    async def locked(self, conn: Connection, loop_id: uuid.UUID) -> Loop:
        loop = await loops.get_for_update(conn, loop_id=loop_id)
        if loop is None:
            raise LoopNotFound(f"no loop {loop_id}")
        return loop

    async def record(
        self, conn: Connection, loop: Loop, name: str, reason: str, log: str | None = None
    ) -> None:
        await events.insert_many(
            conn, [NewEvent(name=name, loop_id=loop.id, reason=reason, log=log)]
        )
        _log.info(name, loop_id=str(loop.id), status=loop.status, reason=reason)
        await events.publish(
            conn,
            {"type": "status", "loop_id": str(loop.id), "status": loop.status, "reason": reason},
        )

    async def redispatch(self, conn: Connection, loop: Loop, reason: str) -> Loop:
        """Make the loop runnable again from where it stopped, with a new generation."""
        token = uuid.uuid4()
        unresolved = await tool_calls.list_unresolved(conn, loop_id=loop.id)
        if unresolved:
            # Revoke before re-enqueueing, or the claim's lease check would strand them.
            await tool_calls.revoke_leases(conn, loop_id=loop.id)
            runnable = await self.runnable(conn, loop, unresolved)
            status = LoopStatus.RUNNING if runnable else LoopStatus.WAITING
            row = await loops.set_status(
                conn, loop_id=loop.id, status=status, execution_token=token, reason=reason
            )
            await dispatch.enqueue_tools(
                conn,
                None,
                loop_id=loop.id,
                generation=token,
                calls=runnable,
                lease_seconds=None,
                notify=True,
            )
            return row
        row = await loops.set_status(
            conn, loop_id=loop.id, status=LoopStatus.QUEUED, execution_token=token, reason=reason
        )
        await dispatch.enqueue_llm(
            conn,
            None,
            loop_id=loop.id,
            generation=token,
            lease_seconds=self.lease_for(loop.agent),
            notify=True,
        )
        return row

    async def cancel_in_flight(
        self, conn: Connection, loop: Loop, action: str, *, only_generation: bool = False
    ) -> None:
        await messages.fail_shells(conn, loop_id=loop.id)
        await jobs.delete_for_loop(conn, loop_id=loop.id)
        payload: dict[str, object] = {"loop_id": str(loop.id), "action": action}
        if only_generation and loop.execution_token is not None:
            # Re-dispatched in the same transaction: workers cancel only the revoked
            # generation, never the new turn they may claim before this NOTIFY lands.
            payload["token"] = str(loop.execution_token)
        await events.control(conn, payload)

    # --- transitions --------------------------------------------------------------------

    async def start(
        self,
        *,
        agent: str,
        message: str,
        subject: str | None = None,
        state: dict[str, Any] | None = None,
        title: str | None = None,
        observe: bool = False,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
    ) -> Loop:
        async with transaction(self.pool) as conn:
            return await self.start_in(
                conn,
                agent=agent,
                message=message,
                subject=subject,
                state=state,
                title=title,
                observe=observe,
                concurrency_key=concurrency_key,
                concurrency_limit=concurrency_limit,
            )

    async def start_in(
        self,
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
        """Start a loop inside the caller's transaction (engine/starting.py)."""
        return await starting.start_in(
            self,
            conn,
            agent=agent,
            message=message,
            subject=subject,
            state=state,
            title=title,
            observe=observe,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
            loop_id=loop_id,
            message_key=message_key,
        )

    async def append_message(self, loop_id: uuid.UUID, content: str) -> Loop:
        """Add a user message to a loop at rest and continue it with a new turn."""
        return await sending.append_message(self, loop_id, content)

    async def send(
        self,
        loop_id: uuid.UUID,
        content: str,
        *,
        mode: str | None = None,
        idempotency_key: str | None = None,
        request_hash: bytes | None = None,
        sent_by: str | None = None,
    ) -> sending.Sent:
        """Send a user message to a loop in any state (engine/sending.py)."""
        return await sending.send(
            self,
            loop_id,
            content,
            mode=mode,
            idempotency_key=idempotency_key,
            request_hash=request_hash,
            sent_by=sent_by,
        )

    async def regenerate(self, loop_id: uuid.UUID, message_id: int) -> Loop:
        """Re-run the loop from just after `message_id` (engine/forks.py)."""
        return await forks.regenerate(self, loop_id, message_id)

    async def fork(self, loop_id: uuid.UUID, message_id: int, *, title: str | None = None) -> Loop:
        """A new paused loop holding the history up to and including `message_id`."""
        async with transaction(self.pool) as conn:
            source = await loops.get(conn, loop_id=loop_id)  # no lock: never disturb it
            if source is None:
                raise LoopNotFound(f"no loop {loop_id}")
            return await forks.fork_in(conn, source=source, message_id=message_id, title=title)

    async def decide(
        self,
        tool_call_id: int,
        *,
        approve: bool,
        reason: str | None = None,
        decided_by: str | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> ToolCall:
        """Approve or deny a parked tool call (engine/decisions.py)."""
        return await decisions.decide(
            self,
            tool_call_id,
            approve=approve,
            reason=reason,
            decided_by=decided_by,
            arguments=arguments,
        )

    async def answer_input(
        self,
        tool_call_id: int,
        *,
        action: str | None = None,
        content: dict[str, Any] | None = None,
        responses: dict[str, dict[str, Any]] | None = None,
        answered_by: str | None = None,
    ) -> ToolCall:
        """Answer an MCP server's input request on a parked call (engine/decisions.py)."""
        return await decisions.answer_input(
            self,
            tool_call_id,
            action=action,
            content=content,
            responses=responses,
            answered_by=answered_by,
        )

    async def pause(
        self, loop_id: uuid.UUID, *, reason: str = TransitionReason.PAUSED_BY_USER
    ) -> Loop:
        """Pause the loop and, with it, its running child loops (engine/cascade.py)."""
        async with transaction(self.pool) as conn:
            loop = await self.locked(conn, loop_id)
            if loop.status == LoopStatus.PAUSED:
                return loop
            if loop.status not in (*ACTIVE, LoopStatus.INIT):
                raise InvalidTransition(
                    f"cannot pause a {loop.status} loop", current_status=loop.status
                )
            return await self.pause_in(conn, loop, reason)

    async def pause_in(self, conn: Connection, loop: Loop, reason: str) -> Loop:
        """Pause a loop locked by the caller, then its children (after it: the lock order)."""
        row = await loops.set_status(
            conn, loop_id=loop.id, status=LoopStatus.PAUSED, execution_token=None, reason=reason
        )
        await self.cancel_in_flight(conn, row, "pause")
        await self.record(conn, row, "loop.paused", reason)
        await cascade.pause_children(self, conn, row)
        return row

    async def stop(self, loop_id: uuid.UUID) -> Loop:
        """Stop the loop and every child loop under it (engine/cascade.py)."""
        async with transaction(self.pool) as conn:
            loop = await self.locked(conn, loop_id)
            if loop.status == LoopStatus.STOPPED:
                return loop
            if loop.status in (LoopStatus.COMPLETED, LoopStatus.FAILED):
                raise InvalidTransition(
                    f"cannot stop a {loop.status} loop", current_status=loop.status
                )
            return await self.stop_in(conn, loop, TransitionReason.STOPPED_BY_USER)

    async def stop_in(self, conn: Connection, loop: Loop, reason: str) -> Loop:
        """Stop a loop locked by the caller, then its children (after it: the lock order)."""
        row = await loops.set_status(
            conn, loop_id=loop.id, status=LoopStatus.STOPPED, execution_token=None, reason=reason
        )
        await self.cancel_in_flight(conn, row, "stop")
        await self.record(conn, row, "loop.stopped", reason)
        await cascade.stop_children(self, conn, row)
        return row

    async def resume(
        self,
        loop_id: uuid.UUID,
        *,
        from_: Iterable[str] | None = None,
        max_steps: int | None = None,
        max_tokens_total: int | None = None,
        max_cost: Decimal | None = None,
    ) -> Loop:
        """Dispatch the loop again; `max_steps` / `max_tokens_total` / `max_cost` set its own
        limits first (kept in its state), so a loop paused by a limit can go on. Children
        paused with it are resumed with it."""
        allowed = set(DEFAULT_RESUME_FROM if from_ is None else from_)
        bad = sorted(s for s in allowed if s not in {str(x) for x in RESUMABLE})
        if bad:
            raise BadRequest(
                f"status(es) {bad} can never be resumed; resumable: "
                f"{sorted(str(s) for s in RESUMABLE)}"
            )
        async with transaction(self.pool) as conn:
            loop = await self.locked(conn, loop_id)
            if loop.status not in allowed:
                raise InvalidTransition(
                    f"loop is {loop.status}; resume allowed from {sorted(allowed)}",
                    current_status=loop.status,
                )
            patch = loop_limits.raised(
                loop, max_steps=max_steps, max_tokens_total=max_tokens_total, max_cost=max_cost
            )
            if patch:
                loop = await loops.merge_state(conn, loop_id=loop.id, patch=patch) or loop
            row = await self.redispatch(conn, loop, TransitionReason.RESUMED)
            await self.record(conn, row, "loop.resumed", TransitionReason.RESUMED)
            await cascade.resume_children(self, conn, row)
            return row

    async def freeze(self, loop_id: uuid.UUID) -> Loop:
        """Workers leave the loop alone; work already running goes on (engine/freezing.py)."""
        return await freezing.freeze(self, loop_id)

    async def unfreeze(self, loop_id: uuid.UUID) -> Loop:
        """Dispatch again what was dropped while frozen (engine/freezing.py)."""
        return await freezing.unfreeze(self, loop_id)

    async def observe(self, loop_id: uuid.UUID, observed: bool = True) -> Loop:
        async with transaction(self.pool) as conn:
            row = await loops.set_flags(conn, loop_id=loop_id, observed=observed)
            if row is None:
                raise LoopNotFound(f"no loop {loop_id}")
            return row

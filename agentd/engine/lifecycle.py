"""Loop lifecycle: start, continue, pause, resume, stop, freeze, observe, approve/deny,
regenerate and fork.

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

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from agentd import logs
from agentd.db.pool import Connection, Pool, transaction
from agentd.engine import (
    approval_edits,
    dispatch,
    forks,
    inputs,
    loop_limits,
    loop_state,
    steering,
)
from agentd.errors import (
    AlreadyDecided,
    BadRequest,
    Conflict,
    IdempotencyKeyReused,
    InvalidTransition,
    LoopNotFound,
    ToolCallNotFound,
)
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.states import (
    ACTIVE,
    RESUMABLE,
    ApprovalStatus,
    InputMode,
    InputStatus,
    LoopStatus,
    TransitionReason,
)
from agentd.store import agent_versions, events, jobs, loop_inputs, loops, mcp, messages, tool_calls
from agentd.store.models import Loop, LoopInput, NewEvent, ToolCall

if TYPE_CHECKING:
    pass

#: The result of a tool call an interrupt cancelled before it ran (what the model sees).
INTERRUPTED_RESULT = "interrupted: the user sent a new message before this call finished"


@dataclass(frozen=True)
class Sent:
    """A message sent to a loop: the loop after the send, and the input as it is now."""

    loop: Loop
    input: LoopInput
    replayed: bool


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

    def _lease(self, agent: str) -> float:
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

    async def _locked(self, conn: Connection, loop_id: uuid.UUID) -> Loop:
        loop = await loops.get_for_update(conn, loop_id=loop_id)
        if loop is None:
            raise LoopNotFound(f"no loop {loop_id}")
        return loop

    async def _record(
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

    async def _dispatch(self, conn: Connection, loop: Loop, reason: str) -> Loop:
        """Make the loop runnable again from where it stopped, with a new generation."""
        token = uuid.uuid4()
        unresolved = await tool_calls.list_unresolved(conn, loop_id=loop.id)
        if unresolved:
            # Revoke before re-enqueueing, or the claim's lease check would strand them.
            await tool_calls.revoke_leases(conn, loop_id=loop.id)
            runnable = [c for c in unresolved if not _awaiting_person(c)]
            if await self._sequential_for(conn, loop):
                runnable = [c for c in unresolved[:1] if not _awaiting_person(c)]
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
            lease_seconds=self._lease(loop.agent),
            notify=True,
        )
        return row

    async def _run_decided(self, conn: Connection, loop: Loop, call: ToolCall, reason: str) -> None:
        """A person decided a parked call: run it now if the loop is live (a paused loop runs
        it on resume), and leave `waiting` once nobody else is waited for."""
        if loop.status not in (LoopStatus.RUNNING, LoopStatus.WAITING) or not loop.execution_token:
            return
        await dispatch.enqueue_tools(
            conn,
            None,
            loop_id=loop.id,
            generation=loop.execution_token,
            calls=[call],
            lease_seconds=None,
            notify=True,
        )
        if loop.status == LoopStatus.WAITING and not await tool_calls.count_pending_approval(
            conn, loop_id=loop.id
        ):
            await loops.fenced_transition(
                conn,
                loop_id=loop.id,
                execution_token=loop.execution_token,
                from_statuses=[LoopStatus.WAITING],
                status=LoopStatus.RUNNING,
                reason=reason,
                new_token=loop.execution_token,
            )

    async def _cancel_in_flight(
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
        """Start a loop inside the caller's transaction (the scheduler's tick uses this).

        `loop_id`: the new loop's id (an AG-UI thread's; Conflict if it exists).
        `message_key`: the first message is recorded as a sent message with this
        idempotency key, so sending it again later adds nothing (api/agui.py)."""
        # The loop runs the version this process loaded; an agent it has no definition of
        # runs the newest version the fleet recorded (its workers have it); neither:
        # UnknownAgent before anything is written.
        if agent in self.registry:
            cls = self.registry.get(agent)
            version = self.registry.version_of(agent)
            agent_key, agent_limit = cls.concurrency_key, cls.concurrency_limit
        else:
            known = await agent_versions.newest(conn, agent=agent)
            if known is None:
                self.registry.get(agent)  # raises, naming the agents known here
                raise AssertionError("unreachable")
            version = known["id"]
            limits = known["definition"].get("limits") or {}
            agent_key, agent_limit = limits.get("concurrency_key"), limits.get("concurrency_limit")
        if not isinstance(message, str) or not message.strip():
            raise BadRequest("message must be a non-empty string")
        key, limit = _concurrency(agent_key, agent_limit, concurrency_key, concurrency_limit)
        loop_state.check_size(state or {}, self.settings.max_state_bytes)
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
            lease_seconds=self._lease(agent),
            notify=True,
        )
        await events.insert_many(
            conn,
            [NewEvent(name="loop.started", loop_id=loop.id, reason=TransitionReason.STARTED)],
        )
        # Start and end of every loop at info: "follow a loop by loop_id" (observability.md).
        _log.info("loop.started", loop_id=str(loop.id), agent=agent)
        return loop

    async def append_message(self, loop_id: uuid.UUID, content: str) -> Loop:
        """Add a user message to a loop at rest and continue it with a new turn."""
        if not isinstance(content, str) or not content.strip():
            raise BadRequest("content must be a non-empty string")
        async with transaction(self.pool) as conn:
            loop = await self._locked(conn, loop_id)
            if loop.status in ACTIVE:
                raise InvalidTransition(
                    f"loop {loop_id} is {loop.status}; wait for it to finish or pause it first",
                    current_status=loop.status,
                )
            sent = await self._send_in(conn, loop, content, InputMode.QUEUE, None, None, None)
            return sent.loop

    async def send(
        self,
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
        async with transaction(self.pool) as conn:
            loop = await self._locked(conn, loop_id)
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
            return await self._send_in(
                conn, loop, content, wanted, idempotency_key, request_hash, sent_by
            )

    async def _send_in(
        self,
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
            await self._cancel_in_flight(conn, loop, "interrupt", only_generation=True)
            await tool_calls.interrupt_unresolved(conn, loop_id=loop.id, text=INTERRUPTED_RESULT)
        applied = await loop_inputs.apply(conn, loop_id=loop.id, everything=True)
        await steering.record_applied(conn, loop.id, applied)
        await tool_calls.revoke_leases(conn, loop_id=loop.id)
        reason = TransitionReason.CONTINUED if at_rest else TransitionReason.INTERRUPTED
        row = await self._dispatch(conn, loop, reason)
        await self._record(conn, row, "loop.continued" if at_rest else "loop.interrupted", reason)
        mine = next((i for i in applied if i.id == sent.id), sent)
        return Sent(loop=row, input=mine, replayed=False)

    async def regenerate(self, loop_id: uuid.UUID, message_id: int) -> Loop:
        """Re-run the loop from just after `message_id`; later messages are superseded.

        They leave the prompt but stay on record. A running loop is revoked first, as pause
        does (token rotated, in-flight work cancelled by NOTIFY), then re-dispatched.
        """
        async with transaction(self.pool) as conn:
            loop = await self._locked(conn, loop_id)
            msg = await forks.message_of(conn, loop, message_id)
            await forks.check_regenerate_from(conn, loop, msg)
            if loop.status in ACTIVE:
                await self._cancel_in_flight(conn, loop, "regenerate", only_generation=True)
            await tool_calls.revoke_leases(conn, loop_id=loop.id)
            superseded = await messages.supersede_after(conn, loop_id=loop.id, after_id=msg.id)
            cancelled = await tool_calls.cancel_superseded(conn, loop_id=loop.id)
            row = await self._dispatch(conn, loop, TransitionReason.REGENERATED)
            await self._record(
                conn,
                row,
                "loop.regenerated",
                TransitionReason.REGENERATED,
                json.dumps(
                    {"from_message_id": msg.id, "superseded": superseded, "cancelled": cancelled}
                ),
            )
            return row

    async def fork(self, loop_id: uuid.UUID, message_id: int, *, title: str | None = None) -> Loop:
        """A new paused loop holding the history up to and including `message_id`."""
        async with transaction(self.pool) as conn:
            source = await loops.get(conn, loop_id=loop_id)  # no lock: never disturb it
            if source is None:
                raise LoopNotFound(f"no loop {loop_id}")
            return await forks.fork_in(conn, source=source, message_id=message_id, title=title)

    async def pause(
        self, loop_id: uuid.UUID, *, reason: str = TransitionReason.PAUSED_BY_USER
    ) -> Loop:
        async with transaction(self.pool) as conn:
            loop = await self._locked(conn, loop_id)
            if loop.status == LoopStatus.PAUSED:
                return loop
            if loop.status not in (*ACTIVE, LoopStatus.INIT):
                raise InvalidTransition(
                    f"cannot pause a {loop.status} loop", current_status=loop.status
                )
            row = await loops.set_status(
                conn, loop_id=loop.id, status=LoopStatus.PAUSED, execution_token=None, reason=reason
            )
            await self._cancel_in_flight(conn, row, "pause")
            await self._record(conn, row, "loop.paused", reason)
            return row

    async def stop(self, loop_id: uuid.UUID) -> Loop:
        async with transaction(self.pool) as conn:
            loop = await self._locked(conn, loop_id)
            if loop.status == LoopStatus.STOPPED:
                return loop
            if loop.status in (LoopStatus.COMPLETED, LoopStatus.FAILED):
                raise InvalidTransition(
                    f"cannot stop a {loop.status} loop", current_status=loop.status
                )
            row = await loops.set_status(
                conn,
                loop_id=loop.id,
                status=LoopStatus.STOPPED,
                execution_token=None,
                reason=TransitionReason.STOPPED_BY_USER,
            )
            await self._cancel_in_flight(conn, row, "stop")
            await self._record(conn, row, "loop.stopped", TransitionReason.STOPPED_BY_USER)
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
        limits first (kept in its state), so a loop paused by a limit can go on."""
        allowed = set(DEFAULT_RESUME_FROM if from_ is None else from_)
        bad = sorted(s for s in allowed if s not in {str(x) for x in RESUMABLE})
        if bad:
            raise BadRequest(
                f"status(es) {bad} can never be resumed; resumable: "
                f"{sorted(str(s) for s in RESUMABLE)}"
            )
        async with transaction(self.pool) as conn:
            loop = await self._locked(conn, loop_id)
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
            row = await self._dispatch(conn, loop, TransitionReason.RESUMED)
            await self._record(conn, row, "loop.resumed", TransitionReason.RESUMED)
            return row

    async def freeze(self, loop_id: uuid.UUID) -> Loop:
        async with transaction(self.pool) as conn:
            await self._locked(conn, loop_id)
            row = await loops.set_flags(conn, loop_id=loop_id, frozen=True)
            assert row is not None
            await self._record(conn, row, "loop.frozen", TransitionReason.FROZEN_BY_USER)
            return row

    async def unfreeze(self, loop_id: uuid.UUID) -> Loop:
        async with transaction(self.pool) as conn:
            loop = await self._locked(conn, loop_id)
            row = await loops.set_flags(conn, loop_id=loop_id, frozen=False)
            assert row is not None
            # Work dropped while frozen (a queued turn, or a tool phase with no turn in
            # flight) is dispatched again; a turn still running keeps its lease.
            between_turns = loop.status == LoopStatus.QUEUED or (
                loop.status in (LoopStatus.RUNNING, LoopStatus.WAITING)
                and loop.lease_expires_at is None
            )
            if loop.frozen and between_turns:
                row = await self._dispatch(conn, row, TransitionReason.UNFROZEN)
            await self._record(conn, row, "loop.unfrozen", TransitionReason.UNFROZEN)
            return row

    async def observe(self, loop_id: uuid.UUID, observed: bool = True) -> Loop:
        async with transaction(self.pool) as conn:
            row = await loops.set_flags(conn, loop_id=loop_id, observed=observed)
            if row is None:
                raise LoopNotFound(f"no loop {loop_id}")
            return row

    async def decide(
        self,
        tool_call_id: int,
        *,
        approve: bool,
        reason: str | None = None,
        decided_by: str | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> ToolCall:
        """Approve or deny a parked tool call. Repeating the same decision is harmless.

        `arguments` (approve only): run the call with these instead of the model's, checked
        against the tool's input schema (docs/approvals.md). Approving again with other
        arguments than the ones that were approved is AlreadyDecided.
        """
        wanted = ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED
        if arguments is not None and not approve:
            raise BadRequest("arguments can only be given when approving")
        async with transaction(self.pool) as conn:
            peek = await tool_calls.get(conn, tool_call_id=tool_call_id)
            if peek is None:
                raise ToolCallNotFound(f"no tool call {tool_call_id}")
            loop = await self._locked(conn, peek.loop_id)  # loop first: the engine's lock order
            tc = await tool_calls.get_for_update(conn, tool_call_id=tool_call_id)
            assert tc is not None
            if tc.approval_status == wanted:
                if arguments is not None and arguments != tc.arguments:
                    raise AlreadyDecided(
                        f"tool call {tool_call_id} was already approved with other arguments",
                        approval_status=tc.approval_status,
                    )
                return tc
            if tc.approval_status != ApprovalStatus.PENDING:
                state = tc.approval_status or (
                    "not awaiting a decision" if tc.executed_at is None else "already run"
                )
                raise AlreadyDecided(
                    f"tool call {tool_call_id} is {state}", approval_status=tc.approval_status
                )
            if arguments is not None and arguments != tc.arguments:
                tools = await mcp.list_tools(conn, loop_id=loop.id)
                schema = next((t.input_schema for t in tools if t.name == tc.name), None)
                decided = await tool_calls.approve_edited(
                    conn,
                    tool_call_id=tc.id,
                    decided_by=decided_by,
                    reason=reason,
                    arguments=approval_edits.check(tc.name, schema, arguments),
                )
            else:
                decided = await tool_calls.decide(
                    conn,
                    tool_call_id=tc.id,
                    approval_status=wanted,
                    decided_by=decided_by,
                    reason=reason,
                )
            assert decided is not None
            await self._run_decided(conn, loop, decided, TransitionReason.APPROVAL_DECIDED)
            await events.insert_many(
                conn,
                [
                    NewEvent(
                        name=f"tool_call.{wanted}",
                        loop_id=loop.id,
                        tool_call_id=tc.id,
                        reason=TransitionReason.APPROVAL_DECIDED,
                        log=_decision_log(reason, decided),
                    )
                ],
            )
            await events.publish(
                conn,
                {
                    "type": "approval",
                    "loop_id": str(loop.id),
                    "tool_call_id": tc.id,
                    "decision": wanted,
                },
            )
            return decided

    async def answer_input(
        self,
        tool_call_id: int,
        *,
        action: str | None = None,
        content: dict[str, Any] | None = None,
        responses: dict[str, dict[str, Any]] | None = None,
        answered_by: str | None = None,
    ) -> ToolCall:
        """Answer an MCP server's input request on a parked call and re-enqueue the call;
        the retry carries the answer. Repeating the same answer is harmless."""
        async with transaction(self.pool) as conn:
            peek = await tool_calls.get(conn, tool_call_id=tool_call_id)
            if peek is None:
                raise ToolCallNotFound(f"no tool call {tool_call_id}")
            loop = await self._locked(conn, peek.loop_id)  # loop first: the engine's lock order
            tc = await tool_calls.get_for_update(conn, tool_call_id=tool_call_id)
            assert tc is not None
            if tc.input_status == InputStatus.PENDING and tc.response_message_id is None:
                response = inputs.build_response(
                    tc.input_request, action=action, content=content, responses=responses
                )
            elif tc.input_status == InputStatus.ANSWERED and tc.input_response is not None:
                response = inputs.build_response(
                    tc.input_request, action=action, content=content, responses=responses
                )
                if response == tc.input_response:
                    return tc
                raise AlreadyDecided(
                    f"tool call {tool_call_id} already has a different answer"
                    f" (round {tc.input_rounds})",
                    input_status=tc.input_status,
                )
            else:
                state = "already run" if tc.executed_at is not None else "not waiting for input"
                raise AlreadyDecided(
                    f"tool call {tool_call_id} is {state}", input_status=tc.input_status
                )
            answered = await tool_calls.answer_input(
                conn, tool_call_id=tc.id, input_response=response, answered_by=answered_by
            )
            assert answered is not None
            await self._run_decided(conn, loop, answered, TransitionReason.INPUT_ANSWERED)
            actions = sorted({a["action"] for a in response["inputResponses"].values()})
            await events.insert_many(
                conn,
                [
                    NewEvent(
                        name="tool_call.input_answered",
                        loop_id=loop.id,
                        tool_call_id=tc.id,
                        reason=TransitionReason.INPUT_ANSWERED,
                        log=f"round={tc.input_rounds} action={','.join(actions)}",
                    )
                ],
            )
            await events.publish(
                conn,
                {
                    "type": "input",
                    "loop_id": str(loop.id),
                    "tool_call_id": tc.id,
                    "actions": actions,
                },
            )
            return answered


def _decision_log(reason: str | None, call: ToolCall) -> str | None:
    """The event's log: the reason, and for an edited approval both argument sets."""
    if call.approved_arguments is None:
        return reason
    return json.dumps(
        {
            "reason": reason,
            "requested_arguments": call.requested_arguments,
            "approved_arguments": call.approved_arguments,
        }
    )


def _awaiting_person(call: ToolCall) -> bool:
    """A parked call: only a person's decision or answer makes it runnable again."""
    return (
        call.approval_status == ApprovalStatus.PENDING or call.input_status == InputStatus.PENDING
    )


def _concurrency(
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

"""The context objects the LLM and tool pipelines pass down their middlewares.

Public (`agentd.TurnContext`, `agentd.ToolContext`): a plugin's middleware reads and writes
them. Importing this module stays cheap (`import agentd` loads it): the runtime and the row
types are only named, and the methods that touch the database import it when called.

agentd's own middlewares hand each other data through the typed fields below, never
through `metadata`: that dict belongs to the host's middlewares (the reference's
`context.metadata`), and agentd neither reads nor writes it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentd import logs
from agentd.agent import Agent, LoopView
from agentd.errors import FenceLost
from agentd.event_names import EventName
from agentd.llm.types import LLMRequest, LLMResponse, Message, ToolSpec
from agentd.states import LoopStatus, ToolCallOutcome, TransitionReason, TurnOutcome

if TYPE_CHECKING:
    from agentd.db.pool import Connection
    from agentd.engine.chaining import Chain
    from agentd.engine.runtime import Runtime
    from agentd.store.jobs import TurnPrefetch
    from agentd.store.mcp import Discovered
    from agentd.store.models import Loop, McpToolRow, NewEvent, ToolCall
    from agentd.store.models import Message as MessageRow
    from agentd.store.tool_calls import Checkpoint


@dataclass
class TurnContext:
    """One LLM turn. `execution_token` is this turn's generation fence."""

    runtime: Runtime
    loop: Loop
    execution_token: uuid.UUID
    agent: Agent | None = None
    history: list[Message] = field(default_factory=list)
    tools: list[McpToolRow] = field(default_factory=list)
    tool_specs: list[ToolSpec] = field(default_factory=list)
    request: LLMRequest | None = None
    response: LLMResponse | None = None
    shell_message_id: int | None = None
    events: list[NewEvent] = field(default_factory=list)
    events_flushed: bool = False
    finished: bool = False  # a finalizer (or host middleware) committed the turn
    # For the host's own middlewares to pass data between them; agentd never touches it.
    metadata: dict[str, Any] = field(default_factory=dict)
    # How the turn ended, for its metrics and span (engine/scopes.py); the first noted wins
    # (Telemetry.turn_outcome). None: the scope derives it from the response or exception.
    outcome: TurnOutcome | None = None
    # The class of the error a handler caught and settled (the span's `error.type`).
    error_type: str | None = None
    # The agent's MCP servers' timeouts (ToolDiscovery): the tool calls this turn leases
    # get a lease that outlasts the slowest (Runtime.tool_lease_seconds).
    mcp_timeouts: list[float] = field(default_factory=list)
    # The claim's prefetch (store.jobs.TurnPrefetch): the messages, tool calls and MCP
    # tools/sessions this turn reads; None when the turn was not started by a claim.
    prefetch: TurnPrefetch | None = None
    # The worker's offer of tool slots for the calls this turn's finalize leases to it.
    chain: Chain | None = None
    # A discovery over shared MCP sessions that the turn's finalize records with the turn
    # (ToolDiscovery), so it costs no statement of its own; None: nothing left to record.
    unrecorded: Discovered | None = None
    # The MCP sessions ctx.tools come from, when every server's session is the process's
    # (ToolDiscovery): the worker may then hold both for the loop's chained next turn.
    shared_sessions: list[dict[str, Any]] | None = None

    @property
    def loop_view(self) -> LoopView:
        return LoopView(
            id=self.loop.id,
            subject=self.loop.subject,
            state=self.loop.state,
            step_count=self.loop.step_count,
        )

    async def prompt_inputs(self) -> tuple[list[MessageRow], list[ToolCall]]:
        """The stored messages and tool calls the prompt is built from (engine/transcript.py
        picks the rows): the claim's prefetch when it has them, else read now."""
        if self.prefetch is not None:
            return self.prefetch.messages, self.prefetch.tool_calls
        from agentd.db.pool import connection
        from agentd.store import messages, tool_calls

        async with connection(self.runtime.pool) as conn:
            rows = await messages.list_(conn, loop_id=self.loop.id)
            calls = await tool_calls.list_for_loop(conn, loop_id=self.loop.id)
        return rows, calls

    async def complete_loop(self, *, reason: str = TransitionReason.COMPLETED_BY_HOST) -> None:
        """Host-driven completion: finish the loop now, fenced by this turn's token,
        without another LLM request (step_count is not incremented). Messages sent to the
        loop and still pending are applied instead, and the loop goes on with them, as it
        would after the model's last turn (engine/steering.py)."""
        from agentd.db.pool import transaction
        from agentd.engine import dispatch, steering
        from agentd.store import events, loop_inputs, loops, messages
        from agentd.store.models import NewEvent

        async with transaction(self.runtime.pool) as conn:
            # The row lock first: a send that committed before it is seen below.
            if not await loops.lock_turn(
                conn, loop_id=self.loop.id, execution_token=self.execution_token
            ):
                raise FenceLost()
            applied = await loop_inputs.apply(conn, loop_id=self.loop.id, everything=True)
            if applied:
                await messages.fail_shells(conn, loop_id=self.loop.id)
                await steering.record_applied(conn, self.loop.id, applied)
                steered = await loops.fenced_transition(
                    conn,
                    loop_id=self.loop.id,
                    execution_token=self.execution_token,
                    from_statuses=[LoopStatus.RUNNING],
                    status=LoopStatus.QUEUED,
                    reason=TransitionReason.STEERED,
                    new_token=self.execution_token,
                )
                assert steered is not None  # under the row lock, on this turn's token
                await dispatch.enqueue_llm(
                    conn,
                    self.runtime,
                    loop_id=self.loop.id,
                    generation=self.execution_token,
                    lease_seconds=self.loop.lease_seconds,
                    notify=True,
                )
                self.finished = True
                return
            row = await loops.fenced_transition(
                conn,
                loop_id=self.loop.id,
                execution_token=self.execution_token,
                from_statuses=[LoopStatus.RUNNING],
                status=LoopStatus.COMPLETED,
                reason=reason,
            )
            if row is None:
                raise FenceLost()
            await messages.fail_shells(conn, loop_id=self.loop.id)
            await events.insert_many(
                conn, [NewEvent(name=EventName.LOOP_COMPLETED, loop_id=self.loop.id, reason=reason)]
            )
            await events.publish(
                conn,
                {
                    "type": "status",
                    "loop_id": str(self.loop.id),
                    "status": LoopStatus.COMPLETED,
                    "reason": reason,
                },
            )
        self.finished = True
        logs.get("agentd.loop").info("loop.completed", loop_id=str(self.loop.id), reason=reason)


@dataclass
class ToolContext:
    """One tool call. Fenced by the tool's `lease_token` and the loop's `generation`."""

    runtime: Runtime
    tool_call: ToolCall
    lease_token: uuid.UUID
    generation: uuid.UUID
    loop: Loop | None = None
    agent: Agent | None = None
    tool: McpToolRow | None = None
    skip: tuple[str, bool] | None = None
    events: list[NewEvent] = field(default_factory=list)
    held: bool = False  # a middleware holds the step (approval); nothing downstream ran
    # For the host's own middlewares to pass data between them; agentd never touches it.
    metadata: dict[str, Any] = field(default_factory=dict)
    # How the call ended, for its metrics and span (engine/scopes.py); the first noted
    # wins (Telemetry.tool_call_outcome). None: the scope derives it.
    outcome: ToolCallOutcome | None = None
    # What failed (the span's `error.type`), set by the path that knew; None: nothing did.
    error_type: str | None = None
    # The result ToolExecution folded into ResponseCreation's statement instead of
    # checkpointing it alone; None once that statement committed it (or when not folded).
    checkpoint: Checkpoint | None = None
    # The call was checkpointed by an earlier delivery; its result is replayed, not re-run.
    replayed: bool = False
    # A finalizer wrote ctx.events; EventLogging has nothing left to write.
    events_flushed: bool = False
    # (loop, tool) as the claim read them; AgentInitialization then queries nothing.
    prefetched: tuple[Loop, McpToolRow | None] | None = None
    # The worker's offer of an LLM slot for the next turn this call's finish claims.
    chain: Chain | None = None

    async def locked_loop(self, conn: Connection) -> Loop:
        """The call's loop, locked, while this call's generation still runs it (running or
        waiting); FenceLost otherwise (a pause, stop or newer dispatch took it)."""
        from agentd.store import loops

        loop = await loops.get_for_update(conn, loop_id=self.tool_call.loop_id)
        if (
            loop is None
            or loop.execution_token != self.generation
            or loop.status not in (LoopStatus.RUNNING, LoopStatus.WAITING)
        ):
            raise FenceLost()
        return loop

    def skip_execution(self, result: str, success: bool = False) -> None:
        """Record `result` as this call's outcome without invoking the tool."""
        self.skip = (result, success)

    @property
    def sequential(self) -> bool:
        return bool(self.tool_call.metadata.get("sequential"))

"""Every state word agentd writes: one `StrEnum` per vocabulary.

The store, the engine, the pipelines, the API and the admin UI all use these members
instead of string literals; this module imports nothing from agentd so every layer can.
A vocabulary the schema also constrains (a `CHECK (col IN (...))`) is checked against it
by tests/migrations/test_state_vocabularies.py, and docs/state_machine.md lists every
member (tests/unit/test_state_machine_doc.py).
"""

from __future__ import annotations

from enum import StrEnum


class LoopStatus(StrEnum):
    #: created but never started; left by resume.
    INIT = "init"
    #: an LLM turn is enqueued; left by the Worker's claim, pause, stop, or freeze holds it.
    QUEUED = "queued"
    #: a turn or tool phase is in progress; left by ResponseParsing, ResponseCreation's
    #: completion gate, ErrorHandling, pause/stop, or the Reaper when the lease expires.
    RUNNING = "running"
    #: a tool call waits for a person; left by approve/deny, the Reaper's deadline, pause/stop.
    WAITING = "waiting"
    #: the model finished; left by a new user message (continue) or resume.
    COMPLETED = "completed"
    #: a turn failed; left by resume.
    FAILED = "failed"
    #: paused by a person or a limit; left by resume.
    PAUSED = "paused"
    #: force-stopped by a person; terminal unless resumed.
    STOPPED = "stopped"


TERMINAL = frozenset({LoopStatus.COMPLETED, LoopStatus.FAILED, LoopStatus.STOPPED})
RESUMABLE = frozenset(
    {
        LoopStatus.INIT,
        LoopStatus.PAUSED,
        LoopStatus.FAILED,
        LoopStatus.COMPLETED,
        LoopStatus.STOPPED,
    }
)
ACTIVE = frozenset({LoopStatus.QUEUED, LoopStatus.RUNNING, LoopStatus.WAITING})


class ToolCallStatus(StrEnum):
    #: created, or released for a retry; left by the Worker's claim.
    PENDING = "pending"
    #: parked by ApprovalGate; left by approve/deny or the Reaper's deadline.
    WAITING = "waiting"
    #: claimed and not yet checkpointed; left by ToolExecution's checkpoint or the Reaper.
    RUNNING = "running"
    #: checkpointed with a successful result.
    COMPLETED = "completed"
    #: checkpointed with an error result (the model sees it).
    FAILED = "failed"
    CANCELLED = "cancelled"


class TransitionReason(StrEnum):
    """`loops.status_reason` and the `reason` of the loop.* event that recorded it."""

    STARTED = "started"
    CLAIMED = "claimed"
    MODEL_FINISHED = "model_finished"
    TOOL_CALLS = "tool_calls"
    TOOLS_RESOLVED = "tools_resolved"
    PAUSED_BY_USER = "paused_by_user"
    RESUMED = "resumed"
    STOPPED_BY_USER = "stopped_by_user"
    CONTINUED = "continued_with_message"
    MAX_STEPS = "max_steps_exceeded"
    MAX_DURATION = "max_duration_exceeded"
    TOKEN_BUDGET = "token_budget_exceeded"
    COST_BUDGET = "cost_budget_exceeded"
    COMPACTED = "compacted"
    REGENERATED = "regenerated"
    FORKED = "forked"
    TURN_FAILED = "turn_failed"
    TOOL_FAILED = "tool_failed"
    COMPLETED_BY_HOST = "completed_by_host"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVAL_DECIDED = "approval_decided"
    AWAITING_INPUT = "awaiting_input"
    INPUT_ANSWERED = "input_answered"
    REAPED_LEASE_EXPIRED = "reaped_lease_expired"
    REAPED_WORKER_DEAD = "reaped_worker_dead"
    REAPED_JOB_LOST = "reaped_job_lost"
    RELEASED_ON_SHUTDOWN = "released_on_shutdown"
    #: a turn given up while the database was unreachable, handed back once it answers
    RELEASED_AFTER_OUTAGE = "released_after_outage"
    UNFROZEN = "unfrozen"
    FROZEN_BY_USER = "frozen_by_user"
    #: the Reaper found a queued loop without a live job (or queued too long): new token.
    REAPED_QUEUED = "reaped_queued"
    #: the Reaper found every tool result in but no next turn enqueued.
    REAPED_DROPPED_CONTINUATION = "reaped_dropped_continuation"
    #: NetworkCalling deferred the turn (same generation, job due later); see limits.md.
    PROVIDER_BACKOFF = "provider_backoff"
    PROVIDER_CONCURRENCY = "provider_concurrency"
    PROVIDER_RPM = "provider_rpm"
    PROVIDER_TPM = "provider_tpm"
    #: the Reaper found the loop queued on an agent version no live worker can run; it
    #: keeps its job and generation, and a worker that has the version claims it.
    WAITING_FOR_VERSION = "waiting_for_version"
    #: the loop moved to another agent version at a turn boundary (loop.upgraded).
    UPGRADED = "upgraded"
    #: the run ended with steering messages pending: the loop continues with them
    #: (ResponseParsing's finalize, engine/steering.py).
    STEERED = "steered"
    #: a message sent with `mode: interrupt` cancelled the turn in flight (Lifecycle.send).
    INTERRUPTED = "interrupted"
    #: a child loop paused because its parent was (resumed with it; engine/cascade.py).
    PAUSED_WITH_PARENT = "paused_with_parent"
    #: a child loop stopped because its parent was.
    STOPPED_WITH_PARENT = "stopped_with_parent"


#: The reasons a provider limit defers a turn with (`store.providers.admit`).
DEFERRALS = frozenset(
    {
        TransitionReason.PROVIDER_BACKOFF,
        TransitionReason.PROVIDER_CONCURRENCY,
        TransitionReason.PROVIDER_RPM,
        TransitionReason.PROVIDER_TPM,
    }
)


class ApprovalStatus(StrEnum):
    """`tool_calls.approval_status`; NULL when the call needs no approval."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    #: the Reaper passed the approval deadline.
    EXPIRED = "expired"


class InputStatus(StrEnum):
    """`tool_calls.input_status`: an MCP server asked for input mid-call; NULL otherwise."""

    PENDING = "pending"
    ANSWERED = "answered"


class InputMode(StrEnum):
    """`loop_inputs.mode`: how a message sent to a running loop reaches it (docs/api.md)."""

    #: applied when the run would otherwise complete; the loop continues with it.
    QUEUE = "queue"
    #: applied at the next turn boundary, so the model sees it on its next call.
    INJECT = "inject"
    #: cancels the turn in flight and is applied at once.
    INTERRUPT = "interrupt"


class LoopInputStatus(StrEnum):
    """`loop_inputs.status`."""

    #: accepted, not yet a message: left by the next turn's start (engine/steering.py), an
    #: interrupt or a send to the loop at rest (Lifecycle.send).
    PENDING = "pending"
    #: it is the transcript row `message_id` names.
    APPLIED = "applied"


class MessageStatus(StrEnum):
    #: an assistant shell being streamed into by the turn that owns it.
    PROCESSING = "processing"
    COMPLETED = "completed"
    #: the turn that owned the shell failed.
    FAILED = "failed"


class JobQueue(StrEnum):
    """`jobs.queue`: jobs have no status column; a row exists until its work is done."""

    LLM = "llm"
    TOOL = "tool"
    MAINTENANCE = "maintenance"


class WebhookDeliveryStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    #: attempts exhausted.
    FAILED = "failed"


class WebhookAttempt(StrEnum):
    """What one delivery attempt came to (the dispatcher's report, not a column)."""

    DELIVERED = "delivered"
    RETRIED = "retried"
    FAILED = "failed"
    #: another dispatcher took the delivery over; nothing recorded.
    FENCE_LOST = "fence_lost"


class TurnOutcome(StrEnum):
    """The `outcome` label of agentd_turns: how one LLM turn ended."""

    #: the model finished the loop.
    COMPLETED = "completed"
    #: the model asked for tools.
    TOOL_CALLS = "tool_calls"
    #: the loop was settled failed / paused.
    FAILED = "failed"
    PAUSED = "paused"
    #: another generation owned the turn.
    FENCE_LOST = "fence_lost"
    #: the renewer cancelled it.
    LEASE_LOST = "lease_lost"
    #: pause/stop/shutdown.
    CANCELLED = "cancelled"
    #: the database went away mid-turn (the reaper re-runs it).
    DB_UNAVAILABLE = "db_unavailable"
    #: a migration outdated a cached statement: the turn was given back and runs again.
    RETRIED = "retried"
    #: the scope ended with no outcome noted and no response.
    UNKNOWN = "unknown"


class ToolCallOutcome(StrEnum):
    """The `outcome` label of agentd_tool_calls: how one tool call job ended."""

    #: a result was checkpointed.
    COMPLETED = "completed"
    #: a result the model sees as an error (MCP isError, a timeout) was checkpointed.
    ERROR = "error"
    #: held for a person.
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_INPUT = "awaiting_input"
    #: an MCP task polled later, no worker held.
    AWAITING_TASK = "awaiting_task"
    FAILED = "failed"
    FENCE_LOST = "fence_lost"
    LEASE_LOST = "lease_lost"
    CANCELLED = "cancelled"
    DB_UNAVAILABLE = "db_unavailable"
    UNKNOWN = "unknown"

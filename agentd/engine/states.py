"""Loop and tool call states, and the reasons recorded on every transition."""

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
    UNFROZEN = "unfrozen"

"""The names of events: rows of the `events` table (GET /v1/loops/{id}/events, the fleet
feed) and the types of webhook messages. The strings are the wire contract; the enum keeps
every emitter and reader spelling them the same way.

Wire logs of MCP exchanges are named per method, `mcp.<method>` (outbound) and
`mcp_inbound.<method>` (a mount's clients): families, not members (`wire_name`).
"""

from __future__ import annotations

from enum import StrEnum


class EventName(StrEnum):
    # a loop's lifecycle
    LOOP_STARTED = "loop.started"
    LOOP_COMPLETED = "loop.completed"
    LOOP_FAILED = "loop.failed"
    LOOP_PAUSED = "loop.paused"
    LOOP_STOPPED = "loop.stopped"
    LOOP_RESUMED = "loop.resumed"
    LOOP_CONTINUED = "loop.continued"
    LOOP_INTERRUPTED = "loop.interrupted"
    LOOP_REGENERATED = "loop.regenerated"
    LOOP_FROZEN = "loop.frozen"
    LOOP_UNFROZEN = "loop.unfrozen"
    LOOP_FORKED = "loop.forked"
    LOOP_MESSAGE_RECEIVED = "loop.message_received"
    LOOP_MESSAGE_APPLIED = "loop.message_applied"
    LOOP_STATE_CHANGED = "loop.state_changed"
    LOOP_UPGRADE_REQUESTED = "loop.upgrade_requested"
    LOOP_UPGRADED = "loop.upgraded"
    LOOP_WAITING_FOR_VERSION = "loop.waiting_for_version"
    # child loops (agents as tools): written on the parent
    LOOP_CHILD_STARTED = "loop.child_started"
    LOOP_CHILD_FINISHED = "loop.child_finished"
    #: a webhook type only (a loop paused by one of its budgets), not an event row
    LOOP_BUDGET_EXCEEDED = "loop.budget_exceeded"
    # turns
    TURN_COMPLETED = "turn.completed"
    TURN_TOOL_CALLS = "turn.tool_calls"
    TURN_DEFERRED = "turn.deferred"
    TURN_COMPACTED = "turn.compacted"
    TURN_RECLAIMED = "turn.reclaimed"
    # tool calls
    TOOL_CALL_COMPLETED = "tool_call.completed"
    TOOL_CALL_AWAITING_APPROVAL = "tool_call.awaiting_approval"
    TOOL_CALL_APPROVED = "tool_call.approved"
    TOOL_CALL_DENIED = "tool_call.denied"
    TOOL_CALL_AWAITING_INPUT = "tool_call.awaiting_input"
    TOOL_CALL_INPUT_ANSWERED = "tool_call.input_answered"
    TOOL_CALL_TASK_STARTED = "tool_call.task_started"
    TOOL_CALL_RECLAIMED = "tool_call.reclaimed"
    # the rest of the fleet
    AGENT_VERSION_CREATED = "agent.version_created"
    LLM_REQUEST = "llm.request"
    SCHEDULE_FAILED = "schedule.failed"
    WEBHOOK_ENDPOINT_DISABLED = "webhook.endpoint_disabled"
    ADMIN_INSPECTOR_CALL = "admin.inspector_call"


#: What a `[[webhooks]]` entry may subscribe to (written by the triggers of
#: store/sql/functions/webhooks.sql and by the statements that record the other three).
WEBHOOK_EVENTS: tuple[EventName, ...] = (
    EventName.LOOP_COMPLETED,
    EventName.LOOP_FAILED,
    EventName.LOOP_PAUSED,
    EventName.LOOP_STOPPED,
    EventName.LOOP_BUDGET_EXCEEDED,
    EventName.TOOL_CALL_AWAITING_APPROVAL,
    EventName.AGENT_VERSION_CREATED,
    EventName.LOOP_UPGRADED,
    EventName.LOOP_MESSAGE_RECEIVED,
)

_NAMES = frozenset(str(e) for e in EventName)

#: Families of wire-log names: `<family>.<MCP method>`.
WIRE_FAMILIES = ("mcp", "mcp_inbound")


def wire_name(family: str, method: str) -> str:
    """The name of a wire-log event of an MCP exchange (`mcp.tools/call`)."""
    if family not in WIRE_FAMILIES:
        raise ValueError(f"unknown wire-log family {family!r}; known: {list(WIRE_FAMILIES)}")
    return f"{family}.{method}"


def is_known(name: str) -> bool:
    """Whether `name` is an event name agentd writes: a member, or a wire-log name."""
    if name in _NAMES:
        return True
    family, dot, method = name.partition(".")
    return bool(dot and method) and family in WIRE_FAMILIES

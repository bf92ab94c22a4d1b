"""Frozen row types returned by the store."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Self
from uuid import UUID, SafeUUID

if TYPE_CHECKING:
    from agentd.db.pool import Record


def _uuid(text: str) -> UUID:
    """UUID(text), for the canonical form PostgreSQL writes, without the constructor's
    parsing of the other forms (a few per row of a claim's prefetch)."""
    if len(text) != 36:
        return UUID(text)
    u = object.__new__(UUID)
    object.__setattr__(u, "int", int(text.replace("-", ""), 16))  # raises as UUID() does
    object.__setattr__(u, "is_safe", SafeUUID.unknown)
    return u


def _convert(type_name: str) -> Any:
    """How a field's `to_jsonb` string becomes its Python value (None: kept as is)."""
    if type_name.startswith("UUID"):
        return _uuid
    if type_name.startswith("datetime"):
        return datetime.fromisoformat
    if type_name.startswith("Decimal"):
        return _decimal
    return None


def _decimal(value: object) -> Decimal:
    # to_json renders numeric as a JSON number, which json.loads makes a float: its
    # shortest repr gives back the column's digits up to 15 significant ones. Only the
    # claims' copies of a loop come this way (for the budget check); the API reads rows.
    return Decimal(str(value))


class _Row:
    # Per row class, computed once: field names, and per field the converter for its
    # to_jsonb form (claims prefetch whole histories, so this runs per message per turn).
    _names: frozenset[str]
    _plan: tuple[tuple[str, Any, bool], ...]
    # The fields with a converter, the float ones, and what a row may leave out (its
    # defaults); `_fast`: a plain frozen dataclass (no default_factory, no __post_init__),
    # so a row is built by filling its __dict__ instead of calling the generated __init__.
    _convs: tuple[tuple[str, Any], ...]
    _floats: tuple[str, ...]
    _defaults: dict[str, Any]
    _required: frozenset[str]
    _fast: bool

    @classmethod
    def _fields(cls) -> tuple[frozenset[str], tuple[tuple[str, Any, bool], ...]]:
        plan = cls.__dict__.get("_plan")
        if plan is None:
            fields = dataclasses.fields(cls)  # type: ignore[arg-type]
            plan = tuple(
                (f.name, _convert(str(f.type)), str(f.type).startswith("float")) for f in fields
            )
            cls._convs = tuple((name, conv) for name, conv, _ in plan if conv is not None)
            cls._floats = tuple(name for name, conv, is_float in plan if conv is None and is_float)
            cls._defaults = {
                f.name: f.default for f in fields if f.default is not dataclasses.MISSING
            }
            cls._required = frozenset(
                f.name
                for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            )
            cls._fast = not hasattr(cls, "__post_init__") and all(
                f.default_factory is dataclasses.MISSING and f.init for f in fields
            )
            cls._plan = plan
            cls._names = frozenset(f.name for f in fields)
        return cls._names, plan

    @classmethod
    def _build(cls, values: dict[str, Any]) -> Self:
        """The row from its field values (a subset of its fields, with every required one):
        what `cls(**values)` makes, without the generated __init__'s per-field setattr."""
        if cls._fast and cls._required.issubset(values):
            row = object.__new__(cls)
            attrs = row.__dict__
            attrs.update(cls._defaults)
            attrs.update(values)
            return row
        return cls(**values)  # raises as the constructor does when a field is missing

    def replace(self, **changes: Any) -> Self:
        """`dataclasses.replace(self, **changes)`, without the generated __init__ over every
        field (a tool call has 40; the pipeline replaces one twice per call)."""
        names, _ = type(self)._fields()
        if not names.issuperset(changes):  # raises as dataclasses.replace does
            return dataclasses.replace(self, **changes)  # type: ignore[type-var]
        return self._build({**self.__dict__, **changes})

    @classmethod
    def from_record(cls, rec: Record) -> Self:
        names, _ = cls._fields()
        return cls._build({k: rec[k] for k in names.intersection(rec.keys())})

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Self:
        """A row from its `to_jsonb` form (the claims' prefetch): uuids and timestamps are
        strings there, everything else (numbers, jsonb columns) already has its type."""
        names, _ = cls._fields()
        # Usually every key is a field (the row's own columns): copied in C.
        out = dict(obj) if names.issuperset(obj) else {k: obj[k] for k in names.intersection(obj)}
        for name, conv in cls._convs:
            v = out.get(name)
            if v is not None and (isinstance(v, str) or conv is _decimal):
                out[name] = conv(v)
        for name in cls._floats:
            v = out.get(name)
            if isinstance(v, int):
                out[name] = float(v)
        return cls._build(out)


@dataclass(frozen=True)
class Loop(_Row):
    id: UUID
    agent: str
    subject: str | None
    title: str | None
    status: str
    status_reason: str | None
    state: dict[str, Any]
    execution_token: UUID | None
    lease_expires_at: datetime | None
    lease_seconds: float | None
    worker_id: UUID | None
    turn_started_at: datetime | None
    step_count: int
    error_message: str | None
    frozen: bool
    observed: bool
    tokens_prompt: int
    tokens_completion: int
    tokens_cached: int
    created_at: datetime
    updated_at: datetime
    tokens_estimated: bool = False
    forked_from_loop_id: UUID | None = None
    forked_from_message_id: int | None = None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    concurrency_held: bool = False  # holds one of its key's slots (docs/limits.md)
    # 0012: cost and speed roll-ups (docs/api.md)
    cost: Decimal | None = None  # USD; None until a turn with a known price
    cost_unpriced_turns: int = 0
    tokens_reasoning: int = 0
    ttft_total: float = 0.0
    ttft_turns: int = 0
    generation_seconds: float = 0.0
    generation_tokens: int = 0
    state_version: int = 1  # 0014: bumped on every change of state (the PATCH ETag)
    # 0025: the agent version the loop runs, and one asked for (applied at its next turn)
    agent_version: str | None = None
    upgrade_to: str | None = None
    upgrade_by: str | None = None
    # 0027: steering messages not yet applied, and whether the next turn applies them all
    steer_pending: int = 0
    steer_release: bool = False
    # 0032: child loops (engine/children.py)
    parent_id: UUID | None = None
    parent_tool_call_id: int | None = None
    depth: int = 0
    child_count: int = 0


@dataclass(frozen=True)
class Message(_Row):
    id: int
    loop_id: UUID
    role: str
    content: str | None
    reasoning: str | None
    hidden: bool
    status: str
    step: int | None
    execution_token: UUID | None
    tool_call_id: int | None
    metadata: dict[str, Any]
    tokens_prompt: int | None
    tokens_completion: int | None
    tokens_cached: int | None
    ttft: float | None
    duration: float | None
    finish_reason: str | None
    error_message: str | None
    created_at: datetime
    updated_at: datetime
    tokens_estimated: bool = False
    summary_through: int | None = None  # a compaction summary: covers messages up to this id
    superseded_at: datetime | None = None  # regenerate: off the prompt, still on record
    forked_from_message_id: int | None = None

    @property
    def is_summary(self) -> bool:
        return self.summary_through is not None


@dataclass(frozen=True)
class ToolCall(_Row):
    id: int
    loop_id: UUID
    message_id: int
    position: int
    provider_call_id: str
    name: str
    arguments: dict[str, Any] | None
    arguments_raw: str | None
    metadata: dict[str, Any]
    status: str
    result: str | None
    structured_result: Any
    is_success: bool | None
    error_message: str | None
    executed_at: datetime | None
    lease_token: UUID | None
    leased_until: datetime | None
    lease_worker_id: UUID | None
    attempts: int
    approval_required: bool
    approval_status: str | None
    approval_deadline: datetime | None
    decided_at: datetime | None
    decided_by: str | None
    decision_reason: str | None
    response_message_id: int | None
    duration: float | None
    created_at: datetime
    updated_at: datetime
    # 0007: waiting on the world (MCP input requests and MCP tasks)
    input_status: str | None = None
    input_request: dict[str, Any] | None = None
    input_response: dict[str, Any] | None = None
    input_rounds: int = 0
    input_answered_at: datetime | None = None
    input_answered_by: str | None = None
    task_id: str | None = None
    task_state: dict[str, Any] | None = None
    # 0013: approved with edits (`arguments` then holds the approved ones)
    requested_arguments: Any = None
    approved_arguments: dict[str, Any] | None = None
    # 0032: the child loop this call started (an agent used as a tool)
    child_loop_id: UUID | None = None


@dataclass(frozen=True)
class Event(_Row):
    id: int
    loop_id: UUID | None
    message_id: int | None
    tool_call_id: int | None
    inbound_session_id: int | None
    name: str
    reason: str | None
    http_method: str | None
    url: str | None
    status: int | None
    request_data: Any
    response_data: Any
    duration: float | None
    log: str | None
    created_at: datetime


@dataclass(frozen=True)
class McpToolRow(_Row):
    id: int
    mcp_session_id: int
    loop_id: UUID
    name: str
    remote_name: str
    description: str | None
    input_schema: dict[str, Any]
    requires_approval: bool
    mcp_name: str
    session_id: str | None
    transport_kind: str
    task_support: str | None = None  # the tool's MCP taskSupport, if its server runs tasks


@dataclass(frozen=True)
class NewEvent:
    """An event to write; built by the engine, flushed in batches."""

    name: str
    loop_id: UUID | None = None
    reason: str | None = None
    http_method: str | None = None
    url: str | None = None
    status: int | None = None
    request_data: Any = None
    response_data: Any = None
    duration: float | None = None
    log: str | None = None
    tool_call_id: int | None = None
    message_id: int | None = None
    inbound_session_id: int | None = None


@dataclass(frozen=True)
class LoopInput(_Row):
    """A message sent to a loop (0027): pending until applied as the `message_id` row."""

    id: int
    loop_id: UUID
    mode: str
    content: str
    status: str
    message_id: int | None
    idempotency_key: str | None
    request_hash: bytes | None
    sent_by: str | None
    created_at: datetime
    applied_at: datetime | None

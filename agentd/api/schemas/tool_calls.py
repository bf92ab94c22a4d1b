"""Tool-call bodies: a decision on an approval, an answer to an input request; the
tool call resource and the input requests waiting for a person."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, Field

from agentd.api.schemas.base import CleanStr, JsonObject, _In
from agentd.json_types import JSONValue
from agentd.states import ApprovalStatus, InputStatus, ToolCallStatus
from agentd.store.models import ToolCall


class Decision(_In):
    reason: CleanStr | None = Field(None, max_length=10_000, description="Why (recorded).")


class Approval(Decision):
    arguments: JsonObject | None = Field(
        None,
        description="Run the call with these arguments instead of the model's (checked "
        "against the tool's input schema: 422 names the failing path). The model's are kept "
        "as `requested_arguments`.",
    )


class InputAnswerItem(_In):
    action: Literal["accept", "decline", "cancel"]
    content: JsonObject | None = Field(
        None, description="With accept: the answer, matching the request's requested_schema."
    )


class InputAnswer(_In):
    """A person's answer to an MCP server's input request (an elicitation)."""

    action: Literal["accept", "decline", "cancel"] | None = Field(
        None, description="For a call that asked one thing (or to decline/cancel them all)."
    )
    content: JsonObject | None = Field(
        None, description="With accept: the answer, matching the request's requested_schema."
    )
    responses: dict[CleanStr, InputAnswerItem] | None = Field(
        None, description="One answer per request key, when the server asked several things."
    )


class ToolCallOut(BaseModel):
    id: int = Field(description="Use with /v1/tool-calls/{id}/approve or /deny.")
    loop_id: UUID
    message_id: int = Field(description="The assistant message that made the call.")
    provider_call_id: str = Field(description="The model's own id for the call.")
    name: str
    arguments: dict[str, Any] | None = Field(description="Null when the model sent invalid JSON.")
    arguments_raw: str | None
    status: ToolCallStatus
    result: str | None
    is_success: bool | None
    error_message: str | None
    approval_required: bool
    approval_status: ApprovalStatus | None = Field(
        description="pending, approved, denied, expired or null."
    )
    approval_deadline: datetime | None
    decided_at: datetime | None
    decided_by: str | None
    decision_reason: str | None
    requested_arguments: JSONValue = Field(
        None,
        description="Set when a person approved other arguments: what the model asked "
        "(`arguments` then holds the approved ones, which ran and which the model sees).",
    )
    approved_arguments: dict[str, Any] | None = Field(
        None, description="The arguments a person approved in place of the model's."
    )
    input_status: InputStatus | None = Field(
        None, description="pending (an MCP server waits for a person's input), answered, or null."
    )
    input_rounds: int = Field(0, description="How many times the server asked for input.")
    task_id: str | None = Field(None, description="The MCP task the server runs the call as.")
    created_at: datetime

    @classmethod
    def of(cls, tc: ToolCall) -> ToolCallOut:
        return cls(
            id=tc.id,
            loop_id=tc.loop_id,
            message_id=tc.message_id,
            provider_call_id=tc.provider_call_id,
            name=tc.name,
            arguments=tc.arguments if isinstance(tc.arguments, dict) else None,
            arguments_raw=tc.arguments_raw,
            status=ToolCallStatus(tc.status),
            result=tc.result,
            is_success=tc.is_success,
            error_message=tc.error_message,
            approval_required=tc.approval_required,
            approval_status=None
            if tc.approval_status is None
            else ApprovalStatus(tc.approval_status),
            approval_deadline=tc.approval_deadline,
            decided_at=tc.decided_at,
            decided_by=tc.decided_by,
            decision_reason=tc.decision_reason,
            requested_arguments=tc.requested_arguments,
            approved_arguments=tc.approved_arguments,
            input_status=None if tc.input_status is None else InputStatus(tc.input_status),
            input_rounds=tc.input_rounds,
            task_id=tc.task_id,
            created_at=tc.created_at,
        )


class InputRequestItem(BaseModel):
    key: str = Field(description="The server's key for this request (see `responses`).")
    method: str | None = Field(description="elicitation/create.")
    mode: str = Field(description="form (answer with content) or url (visit, then accept).")
    message: str | None = Field(description="What the server asks, for the person.")
    requested_schema: dict[str, Any] | None = Field(
        description="JSON Schema the accepted content must match (form mode)."
    )
    url: str | None = Field(description="Where to go (url mode).")


class InputRequestOut(BaseModel):
    tool_call_id: int = Field(description="Answer with POST /v1/tool-calls/{id}/input.")
    loop_id: UUID
    name: str = Field(description="The tool the model called.")
    arguments: dict[str, Any] | None
    round: int = Field(description="1 for the server's first question, 2 for the next, ...")
    requests: list[InputRequestItem]
    asked_at: datetime

    @classmethod
    def of(cls, tc: ToolCall) -> InputRequestOut:
        from agentd.engine.inputs import describe

        return cls(
            tool_call_id=tc.id,
            loop_id=tc.loop_id,
            name=tc.name,
            arguments=tc.arguments if isinstance(tc.arguments, dict) else None,
            round=tc.input_rounds,
            requests=[InputRequestItem(**r) for r in describe(tc.input_request)],
            asked_at=tc.updated_at,
        )

"""/v1/tool-calls/{id}/approve|deny and /v1/agents."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Request

from agentd.api import problems
from agentd.api.routes_loops import BIGINT, app_state
from agentd.api.schemas import AgentOut, Decision, Page, ToolCallOut

router = APIRouter(tags=["approvals"])
agents_router = APIRouter(tags=["agents"])

ToolCallId = Annotated[int, Path(ge=1, le=BIGINT, description="The tool call's id.")]
_DECIDE = problems.responses(400, 401, 403, 404, 409, 413, 422)


async def _decide(
    request: Request, tool_call_id: int, approve: bool, body: Decision | None
) -> ToolCallOut:
    tc = await app_state(request).lifecycle.decide(
        tool_call_id, approve=approve, reason=body.reason if body else None, decided_by="api"
    )
    return ToolCallOut.of(tc)


@router.post("/tool-calls/{tool_call_id}/approve", summary="Approve", responses=_DECIDE)
async def approve(
    tool_call_id: ToolCallId,
    request: Request,
    body: Annotated[Decision | None, Body()] = None,
) -> ToolCallOut:
    """Let a parked call run. Approving an approved call is a no-op; 409 if denied."""
    return await _decide(request, tool_call_id, True, body)


@router.post("/tool-calls/{tool_call_id}/deny", summary="Deny", responses=_DECIDE)
async def deny(
    tool_call_id: ToolCallId,
    request: Request,
    body: Annotated[Decision | None, Body()] = None,
) -> ToolCallOut:
    """Refuse a parked call; the model sees the denial. Idempotent; 409 if approved."""
    return await _decide(request, tool_call_id, False, body)


@agents_router.get("/agents", summary="Registered agents", responses=problems.responses(401))
async def list_agents(request: Request) -> Page[AgentOut]:
    described = app_state(request).registry.describe()
    return Page[AgentOut](items=[AgentOut(**a) for a in described], next_cursor=None)

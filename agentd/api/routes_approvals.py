"""/v1/tool-calls/{id}/approve|deny, MCP input requests (/v1/loops/{id}/inputs,
/v1/tool-calls/{id}/input) and /v1/agents."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, Path, Request

from agentd.api import auth, problems
from agentd.api.routes_loops import BIGINT, app_state, stale_seconds
from agentd.api.schemas import (
    AgentOut,
    AgentUpgradeOut,
    AgentVersionOut,
    Approval,
    Decision,
    InputAnswer,
    InputRequestOut,
    Page,
    ToolCallOut,
    UpgradeAgent,
)
from agentd.db.pool import connection
from agentd.engine import upgrades
from agentd.errors import LoopNotFound
from agentd.store import agent_versions, loops, tool_calls

router = APIRouter(tags=["approvals"])
agents_router = APIRouter(tags=["agents"])

ToolCallId = Annotated[int, Path(ge=1, le=BIGINT, description="The tool call's id.")]
_DECIDE = problems.responses(400, 401, 403, 404, 409, 413, 422)


async def _decide(
    request: Request, tool_call_id: int, approve: bool, body: Decision | None
) -> ToolCallOut:
    tc = await app_state(request).lifecycle.decide(
        tool_call_id,
        approve=approve,
        reason=body.reason if body else None,
        decided_by=auth.caller(request),
        arguments=body.arguments if isinstance(body, Approval) else None,
    )
    return ToolCallOut.of(tc)


@router.post("/tool-calls/{tool_call_id}/approve", summary="Approve", responses=_DECIDE)
async def approve(
    tool_call_id: ToolCallId,
    request: Request,
    body: Annotated[Approval | None, Body()] = None,
) -> ToolCallOut:
    """Let a parked call run, as the model asked or with `arguments` a person edited
    (validated against the tool's input schema: 422 names the path). Approving again is a
    no-op; 409 if denied, or if approved before with other arguments."""
    return await _decide(request, tool_call_id, True, body)


@router.post("/tool-calls/{tool_call_id}/deny", summary="Deny", responses=_DECIDE)
async def deny(
    tool_call_id: ToolCallId,
    request: Request,
    body: Annotated[Decision | None, Body()] = None,
) -> ToolCallOut:
    """Refuse a parked call; the model sees the denial. Idempotent; 409 if approved."""
    return await _decide(request, tool_call_id, False, body)


@router.get(
    "/loops/{loop_id}/inputs",
    summary="Tool calls waiting for a person's input (MCP elicitation)",
    responses=problems.responses(401, 404, 422),
)
async def inputs(loop_id: UUID, request: Request) -> Page[InputRequestOut]:
    """Calls whose MCP server asked for input mid-call (2026-07-28 InputRequiredResult);
    each is parked until answered with POST /v1/tool-calls/{id}/input."""
    state = app_state(request)
    async with connection(state.pool) as conn:
        if await loops.get(conn, loop_id=loop_id) is None:
            raise LoopNotFound(f"no loop {loop_id}")
        rows = await tool_calls.list_pending_input(conn, loop_id=loop_id)
    return Page[InputRequestOut](items=[InputRequestOut.of(c) for c in rows], next_cursor=None)


@router.post(
    "/tool-calls/{tool_call_id}/input", summary="Answer an input request", responses=_DECIDE
)
async def answer_input(
    tool_call_id: ToolCallId, request: Request, body: Annotated[InputAnswer, Body()]
) -> ToolCallOut:
    """Accept (with `content` matching the requested schema: 422 names the field),
    decline or cancel; the call is re-enqueued and retried with the answer. Repeating the
    same answer is a no-op; 409 if the call is not waiting for input."""
    responses = {k: v.model_dump() for k, v in body.responses.items()} if body.responses else None
    tc = await app_state(request).lifecycle.answer_input(
        tool_call_id,
        action=body.action,
        content=body.content,
        responses=responses,
        answered_by=auth.caller(request),
    )
    return ToolCallOut.of(tc)


@agents_router.get("/agents", summary="Registered agents", responses=problems.responses(401))
async def list_agents(request: Request) -> Page[AgentOut]:
    """The agents this API process loaded, and the agents only workers have; each with
    its recorded versions (newest first), the active loops on each and the live workers
    that can run each."""
    state = app_state(request)
    described = {a["name"]: a for a in state.registry.describe()}
    async with connection(state.pool) as conn:
        recorded = await agent_versions.list_(conn, stale_seconds=stale_seconds(state))
    mine = {name: v.id for name, v in state.registry.versions().items()}
    by_agent: dict[str, list[AgentVersionOut]] = {}
    for r in recorded:
        by_agent.setdefault(r["agent"], []).append(
            AgentVersionOut(
                id=r["id"],
                created_at=r["created_at"],
                version_policy=r["version_policy"],
                loops_active=r["loops_active"],
                workers=list(r["workers"]),
                current=mine.get(r["agent"]) == r["id"],
            )
        )
    items = []
    for name in sorted(set(described) | set(by_agent)):
        base = described.get(name) or {
            "name": name,
            "source": None,
            "dialect": None,
            "model": None,
            "streaming": None,
            "sequential_tool_calls": None,
        }
        items.append(AgentOut(**base, version=mine.get(name), versions=by_agent.get(name, [])))
    return Page[AgentOut](items=items, next_cursor=None)


@agents_router.post(
    "/agents/{name}/upgrade",
    summary="Move an agent's loops to another version",
    responses=problems.responses(400, 401, 403, 404, 413, 422),
)
async def upgrade_agent(
    name: str, request: Request, body: Annotated[UpgradeAgent | None, Body()] = None
) -> AgentUpgradeOut:
    """Every loop of the agent not yet on `to_version` (default: the newest), or only those
    on `from_version`, moves at its next turn boundary, a page of loops per request
    (`remaining`: send it again). Loops with an unresolved call the target would orphan
    are listed in `refused` and left as they are. `dry_run` writes nothing."""
    body = body or UpgradeAgent()
    out = await upgrades.upgrade_agent(
        app_state(request).pool,
        name,
        from_version=body.from_version,
        to_version=body.to_version,
        dry_run=body.dry_run,
        by=auth.caller(request),
    )
    return AgentUpgradeOut(**out)

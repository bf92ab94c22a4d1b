"""/v1/loops/{id}/...: what a person does to a loop — pause, resume, stop, freeze,
unfreeze, observe, fork, regenerate, upgrade. Each answers the loop as it now is."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, Request, Response

from agentd.api import auth, problems
from agentd.api.routes_loops import app_state
from agentd.api.schemas import (
    AtMessage,
    ForkLoop,
    LoopOut,
    LoopUpgradeOut,
    Observe,
    Resume,
    UpgradeLoop,
)
from agentd.engine import upgrades

router = APIRouter(prefix="/loops", tags=["loops"])

_CHANGE = problems.responses(400, 401, 403, 404, 409, 413, 422)


@router.post(
    "/{loop_id}/upgrade",
    summary="Move the loop to another agent version",
    responses=problems.responses(400, 401, 403, 404, 409, 413, 422),
)
async def upgrade(
    loop_id: UUID, request: Request, body: Annotated[UpgradeLoop | None, Body()] = None
) -> LoopUpgradeOut:
    """Record a move to `to_version` (default: the agent's newest), applied when the loop's
    next turn starts — never mid-turn. `dry_run` shows the diff (tools renamed or
    removed, approval rules, limits) and writes nothing. 409 `upgrade-would-orphan` while
    an unresolved call's tool would have another name, or none, in the target."""
    body = body or UpgradeLoop()
    out = await upgrades.upgrade_loop(
        app_state(request).pool,
        loop_id,
        to_version=body.to_version,
        dry_run=body.dry_run,
        by=auth.caller(request),
    )
    return LoopUpgradeOut(**out)


@router.post(
    "/{loop_id}/fork",
    status_code=201,
    summary="Fork the loop at a message",
    responses=problems.responses(400, 401, 403, 404, 413, 422),
)
async def fork(loop_id: UUID, body: ForkLoop, request: Request, response: Response) -> LoopOut:
    """A new paused loop holding copies of the history up to and including `message_id`
    (with its tool calls and results); resume it to run. The source loop is untouched."""
    loop = await app_state(request).lifecycle.fork(loop_id, body.message_id, title=body.title)
    response.headers["Location"] = f"/v1/loops/{loop.id}"
    return LoopOut.of(loop)


@router.post("/{loop_id}/regenerate", summary="Re-run from a message", responses=_CHANGE)
async def regenerate(loop_id: UUID, body: AtMessage, request: Request) -> LoopOut:
    """Messages after `message_id` leave the prompt (marked `superseded`, kept on record)
    and the loop runs again from there. A running loop's in-flight turn is cancelled first."""
    return LoopOut.of(await app_state(request).lifecycle.regenerate(loop_id, body.message_id))


@router.post("/{loop_id}/pause", summary="Pause", responses=_CHANGE)
async def pause(loop_id: UUID, request: Request) -> LoopOut:
    """Cancel in-flight work and hold the loop; pausing a paused loop is a no-op."""
    return LoopOut.of(await app_state(request).lifecycle.pause(loop_id))


@router.post("/{loop_id}/resume", summary="Resume", responses=_CHANGE)
async def resume(
    loop_id: UUID, request: Request, body: Annotated[Resume | None, Body()] = None
) -> LoopOut:
    """Dispatch the loop again; `max_steps` / `max_tokens_total` / `max_cost` raise its own
    limits first."""
    statuses = [str(s) for s in body.from_] if body and body.from_ is not None else None
    return LoopOut.of(
        await app_state(request).lifecycle.resume(
            loop_id,
            from_=statuses,
            max_steps=body.max_steps if body else None,
            max_tokens_total=body.max_tokens_total if body else None,
            max_cost=body.max_cost if body else None,
        )
    )


@router.post("/{loop_id}/stop", summary="Stop", responses=_CHANGE)
async def stop(loop_id: UUID, request: Request) -> LoopOut:
    """Force-stop: cancel in-flight work; stopping a stopped loop is a no-op."""
    return LoopOut.of(await app_state(request).lifecycle.stop(loop_id))


@router.post("/{loop_id}/freeze", summary="Freeze (workers skip it)", responses=_CHANGE)
async def freeze(loop_id: UUID, request: Request) -> LoopOut:
    return LoopOut.of(await app_state(request).lifecycle.freeze(loop_id))


@router.post("/{loop_id}/unfreeze", summary="Unfreeze", responses=_CHANGE)
async def unfreeze(loop_id: UUID, request: Request) -> LoopOut:
    return LoopOut.of(await app_state(request).lifecycle.unfreeze(loop_id))


@router.post("/{loop_id}/observe", summary="Publish live deltas for this loop", responses=_CHANGE)
async def observe(
    loop_id: UUID, request: Request, body: Annotated[Observe | None, Body()] = None
) -> LoopOut:
    observed = body.observed if body else True
    return LoopOut.of(await app_state(request).lifecycle.observe(loop_id, observed))

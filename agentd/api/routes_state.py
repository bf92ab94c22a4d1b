"""/v1/loops/{id}/state: read it with its version, change it with a JSON merge patch.

Versions travel as strong ETags (`"<state_version>"`); a PATCH must name the version it
applies to in `If-Match` (RFC 9110 §13.1.1), or `*` to apply to any: without the header
it is 428 Precondition Required (RFC 6585), on a stale version 412.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Header, Request, Response
from pydantic import BaseModel, Field

from agentd.api import hygiene, problems
from agentd.api.problems import ApiProblem
from agentd.api.routes_loops import app_state
from agentd.db.pool import connection
from agentd.engine import loop_state
from agentd.errors import InputInvalid, LoopNotFound, PreconditionRequired
from agentd.store import loops
from agentd.store.models import Loop

router = APIRouter(prefix="/loops", tags=["loops"])

MERGE_PATCH = "application/merge-patch+json"


class StateOut(BaseModel):
    state: dict[str, Any]
    version: int = Field(description="The state's version; also the ETag.")


def _etag(version: int) -> str:
    return f'"{version}"'


def _answer(loop: Loop, response: Response) -> StateOut:
    response.headers["ETag"] = _etag(loop.state_version)
    return StateOut(
        state=loop.state if isinstance(loop.state, dict) else {}, version=loop.state_version
    )


def parse_if_match(value: str | None) -> int | None:
    """The version If-Match names (None for `*`); 428 without one, 412 if none could match."""
    if value is None or not value.strip():
        raise PreconditionRequired(
            'PATCH /state needs If-Match: "<version>" (from GET /state\'s ETag) or If-Match: *'
        )
    if value.strip() == "*":
        return None
    tags = [t.strip() for t in value.split(",") if t.strip()]
    versions = []
    for tag in tags:
        # Weak tags never match under If-Match's strong comparison.
        if len(tag) >= 2 and tag[0] == tag[-1] == '"' and tag[1:-1].isdigit():
            versions.append(int(tag[1:-1]))
    if len(versions) != 1 or len(tags) != 1:
        raise ApiProblem(
            400,
            'If-Match must be one strong ETag like "3" (or *)',
            problem_type="bad-request",
        )
    return versions[0]


@router.get(
    "/{loop_id}/state",
    summary="The loop's state and its version",
    responses=problems.responses(401, 404, 422),
)
async def get_state(loop_id: UUID, request: Request, response: Response) -> StateOut:
    async with connection(app_state(request).pool) as conn:
        loop = await loops.get(conn, loop_id=loop_id)
    if loop is None:
        raise LoopNotFound(f"no loop {loop_id}")
    return _answer(loop, response)


@router.patch(
    "/{loop_id}/state",
    summary="Change the loop's state (JSON merge patch, If-Match)",
    responses=problems.responses(400, 401, 403, 404, 409, 412, 413, 422, 428),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {MERGE_PATCH: {"schema": {"type": "object", "additionalProperties": True}}},
        }
    },
)
async def patch_state(
    loop_id: UUID,
    request: Request,
    response: Response,
    if_match: Annotated[
        str | None,
        Header(
            alias="If-Match",
            max_length=200,
            description='The version the patch applies to, as GET /state\'s ETag ("3"), or *.',
        ),
    ] = None,
) -> StateOut:
    """RFC 7396: members set, nested objects merged, `null` deletes. Only while the loop is
    at rest, waiting or paused (409 while queued or running); its next turn reads it.
    Every change is a `loop.state_changed` event."""
    # The body is read as JSON whatever its Content-Type (api/json_body.py, as every /v1
    # body); application/merge-patch+json is what RFC 7396 names.
    version = parse_if_match(if_match)
    raw = await request.body()
    try:
        # hygiene.parse_json: the API's one set of input rules (no NaN/Infinity, no NUL or
        # lone surrogates, bounded depth: a 100k-deep body is a 422, not a RecursionError).
        body = hygiene.parse_json(raw.decode("utf-8"))
    except hygiene.Unclean as exc:
        raise InputInvalid(str(exc), errors=[{"field": "body", "message": str(exc)}]) from None
    except (ValueError, UnicodeDecodeError):
        raise ApiProblem(400, "the body is not valid JSON", problem_type="bad-request") from None
    state = app_state(request)
    loop, _ = await loop_state.patch(
        state.pool, loop_id, body, if_match=version, max_bytes=state.settings.max_state_bytes
    )
    return _answer(loop, response)

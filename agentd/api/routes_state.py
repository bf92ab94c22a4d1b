"""/v1/loops/{id}/state: read it with its version, change it with a JSON merge patch.

Versions travel as strong ETags (`"<state_version>"`); a PATCH must name the version it
applies to in `If-Match` (RFC 9110 §13.1.1), or `*` to apply to any: without the header
it is 428 Precondition Required (RFC 6585), when no listed tag matches 412. The resource
advertises its one patch format in `Accept-Patch` (RFC 5789 §3.1).
"""

from __future__ import annotations

import re
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Header, Request, Response
from pydantic import BaseModel, Field

from agentd.api import hygiene, json_body, problems
from agentd.api.problems import ApiProblem
from agentd.api.routes_loops import app_state
from agentd.db.pool import connection
from agentd.engine import loop_state
from agentd.errors import InputInvalid, LoopNotFound, PreconditionRequired
from agentd.store import loops
from agentd.store.models import Loop

router = APIRouter(prefix="/loops", tags=["loops"])

MERGE_PATCH = "application/merge-patch+json"
#: RFC 5789 §3.1: on GET, OPTIONS and 415 answers of the resource.
ACCEPT_PATCH = {"Accept-Patch": MERGE_PATCH}
#: One entity-tag of an If-Match list (RFC 9110 §8.8.3: `[W/] DQUOTE *etagc DQUOTE`), then
#: a comma or the end. etagc excludes DQUOTE, space and controls, but not the comma.
_ENTITY_TAG = re.compile(r'[ \t]*(W/)?"([\x21\x23-\x7e\x80-\xff]*)"[ \t]*(?:,|$)')


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


def parse_if_match(value: str | None) -> frozenset[int] | None:
    """The versions If-Match can match (None for `*`); 428 without one, 400 if malformed.

    RFC 9110 §13.1.1: If-Match uses the strong comparison, so a weak tag (`W/"3"`) matches
    nothing, and a list matches when any member does. Tags compare as opaque strings: only
    the exact text an ETag of ours carries (`"3"`) names version 3, never `"03"` or `"+3"`.
    A header that names nothing this resource could match is an empty set (412, after the
    loop is known to exist).
    """
    if value is None or not value.strip():
        raise PreconditionRequired(
            'PATCH /state needs If-Match: "<version>" (from GET /state\'s ETag) or If-Match: *'
        )
    if value.strip() == "*":
        return None
    versions: set[int] = set()
    pos, end = 0, len(value)
    while pos < end:
        if value[pos] in " \t,":  # empty list elements are allowed (RFC 9110 §5.6.1)
            pos += 1
            continue
        tag = _ENTITY_TAG.match(value, pos)
        if tag is None:
            raise ApiProblem(
                400,
                'If-Match must be * or a list of entity tags like "3" (W/"3" never matches)',
                problem_type="bad-request",
            )
        weak, opaque = tag.group(1), tag.group(2)
        # Exactly as _etag writes it: ASCII digits, no sign, no leading zero.
        if not weak and opaque.isascii() and opaque.isdigit() and str(int(opaque)) == opaque:
            versions.add(int(opaque))
        pos = tag.end()
    return frozenset(versions)


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
    response.headers.update(ACCEPT_PATCH)
    return _answer(loop, response)


@router.options(
    "/{loop_id}/state",
    summary="The methods and the patch format the state takes",
    status_code=204,
    response_class=Response,
    responses=problems.responses(401, 422),
)
async def options_state(loop_id: UUID) -> Response:
    """RFC 5789 §3.1: `Accept-Patch` names the one patch format (JSON merge patch)."""
    return Response(status_code=204, headers={"Allow": "GET, HEAD, OPTIONS, PATCH", **ACCEPT_PATCH})


def _check_media_type(request: Request) -> None:
    """415 for a body declared in another JSON-based format (`application/json-patch+json`
    would be misread as a merge patch). Plain `application/json` and non-JSON types (what
    `curl -d` sends) are read as JSON, as every /v1 body (api/json_body.py)."""
    # Several Content-Type fields (a shell alias adding its own) arrive joined by commas:
    # judged one by one, so a merge patch declared beside application/json is accepted.
    declared = json_body.declared_content_type(request.scope)
    types = [part.split(";", 1)[0].strip().lower() for part in declared.split(",")]
    foreign = [t for t in types if t.endswith("+json") and t != MERGE_PATCH]
    if foreign:
        media = foreign[0]
        raise ApiProblem(
            415,
            f"the state takes a JSON merge patch ({MERGE_PATCH}), not {media}",
            problem_type="unsupported-media-type",
            headers=dict(ACCEPT_PATCH),
        )


@router.patch(
    "/{loop_id}/state",
    summary="Change the loop's state (JSON merge patch, If-Match)",
    responses=problems.responses(400, 401, 403, 404, 409, 412, 413, 415, 422, 428),
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
    _check_media_type(request)
    # Several If-Match fields are one comma-separated list (RFC 9110 §5.3).
    fields = request.headers.getlist("if-match")
    version = parse_if_match(", ".join(fields) if fields else if_match)
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

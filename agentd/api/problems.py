"""The one place errors become `application/problem+json` (RFC 9457) responses.

Every problem has a stable `type` URI, `https://agentd.dev/problems/<problem_type>`, where
`problem_type` is the slug an `AgentdError` subclass carries (errors.py). Extra members
(`current_status`, `errors`, ...) come from the error's details.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentd import logs, redact
from agentd.errors import AgentdError, DatabaseError, DatabaseUnavailable, SchemaChanged
from agentd.json_types import JSONValue

log = logs.get("agentd.api")

TYPE_BASE = "https://agentd.dev/problems/"
MEDIA_TYPE = "application/problem+json"

_HTTP_TITLES = {
    400: ("bad-request", "The request is malformed."),
    401: ("unauthorized", "A valid bearer token is required."),
    403: ("forbidden", "This token may not do that."),
    404: ("not-found", "Not found."),
    405: ("method-not-allowed", "Method not allowed."),
    409: ("conflict", "The request conflicts with the current state."),
    412: ("precondition-failed", "The resource is not at the version given in If-Match."),
    413: ("payload-too-large", "The request body is too large."),
    415: ("unsupported-media-type", "Unsupported media type."),
    422: ("validation-error", "The request is invalid."),
    428: ("precondition-required", "This change needs an If-Match header."),
    429: ("too-many-requests", "Too many requests; retry after Retry-After seconds."),
    500: ("internal", "agentd failed."),
    503: ("database-unavailable", "The database cannot be reached."),
}


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(examples=[TYPE_BASE + "loop-not-found"])
    title: str
    status: int
    detail: str


class ApiProblem(Exception):
    """An HTTP-only problem (auth, body size, a bad cursor): no engine error behind it."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        problem_type: str | None = None,
        headers: dict[str, str] | None = None,
        **extra: JSONValue,
    ) -> None:
        super().__init__(detail)
        slug, title = _HTTP_TITLES.get(status, ("http-error", "HTTP error."))
        self.status = status
        self.problem_type = problem_type or slug
        self.title = title
        self.detail = detail
        self.headers = headers
        self.extra = extra


def problem_response(
    status: int,
    problem_type: str,
    title: str,
    detail: str,
    *,
    headers: dict[str, str] | None = None,
    **extra: JSONValue,
) -> Response:
    body = {"type": TYPE_BASE + problem_type, "title": title, "status": status, "detail": detail}
    for key, value in extra.items():
        if key not in body:
            body[key] = value
    # A detail may quote a tool's, a provider's or a person's text: no known secret leaves
    # in an error either (redact.transcript, as in the transcript).
    body = redact.transcript(body)
    return Response(
        json.dumps(body, default=str), status_code=status, media_type=MEDIA_TYPE, headers=headers
    )


def wants_html(request: Request) -> bool:
    """A browser asked (it accepts HTML): it gets a page or a redirect, not a problem."""
    return "text/html" in request.headers.get("accept", "")


def _title(exc: AgentdError) -> str:
    doc = (type(exc).__doc__ or type(exc).__name__).strip()
    return doc.splitlines()[0]


def from_error(exc: AgentdError) -> Response:
    return problem_response(exc.status, exc.problem_type, _title(exc), exc.message, **exc.details)


async def _agentd_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, AgentdError)
    if isinstance(exc, DatabaseUnavailable):
        outages: Outages = request.app.state.outages
        outages.refused(request.url.path, exc)
        return database_unavailable()
    if isinstance(exc, DatabaseError):
        # A statement the database refused: a bug, answered like any unexpected exception.
        log.exception("api.unhandled", path=request.url.path, error=exc.driver)
        return internal_error()
    if exc.status >= 500:
        log.error("api.error", path=request.url.path, problem=exc.problem_type, error=exc.message)
    return from_error(exc)


def database_unavailable() -> Response:
    """503 `database-unavailable` (docs/api.md): nothing was committed; retry shortly."""
    return problem_response(
        503,
        "database-unavailable",
        _HTTP_TITLES[503][1],
        "the database is unavailable or was just migrated; retry",
        headers={"Retry-After": "1"},
    )


def internal_error() -> Response:
    """500 `internal`: nothing of the exception's wording reaches the client."""
    return problem_response(
        500, "internal", _HTTP_TITLES[500][1], "internal error; see the server log"
    )


class Outages:
    """Logs refusals for a database outage as one warning line per episode, no traceback.

    An outage is expected operation (a failover, a restart): each refused request used to
    log `api.unhandled` with a traceback, dozens a second. Now the first refusal logs
    `api.database_unavailable`; later ones are counted and reported at most every
    `interval` seconds (`refused`: how many since the last line) while it lasts.
    """

    def __init__(
        self, interval: float = 30.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = interval
        self.clock = clock
        self._last = -float("inf")
        self._count = 0

    def refused(self, path: str, exc: BaseException) -> None:
        self._count += 1
        now = self.clock()
        if now - self._last < self.interval:
            return
        self._last = now
        log.warning(
            "api.database_unavailable",
            path=path,
            error=exc.driver if isinstance(exc, DatabaseError) else type(exc).__name__,
            cause="schema_changed" if isinstance(exc, SchemaChanged) else "connection",
            refused=self._count,
        )
        self._count = 0


async def _api_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiProblem)
    return problem_response(
        exc.status, exc.problem_type, exc.title, exc.detail, headers=exc.headers, **exc.extra
    )


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(p) for p in loc)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"field": _field(e.get("loc", ())), "message": str(e.get("msg", "invalid"))}
        for e in exc.errors()
    ]
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "invalid request"
    return problem_response(
        422, "validation-error", _HTTP_TITLES[422][1], detail[:2000], errors=errors[:50]
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    slug, title = _HTTP_TITLES.get(exc.status_code, ("http-error", "HTTP error."))
    detail = exc.detail if isinstance(exc.detail, str) else title
    return problem_response(exc.status_code, slug, title, detail, headers=dict(exc.headers or {}))


class CatchAll:
    """Last line of defence: an unexpected exception becomes a logged 500 problem.

    Pure ASGI (not BaseHTTPMiddleware) so streaming responses pass through untouched. If
    the response already started, the connection is simply closed.
    """

    def __init__(self, app: ASGIApp, *, outages: Outages | None = None) -> None:
        self.app = app
        self.outages = outages or Outages()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            path = scope.get("path")
            if isinstance(exc, DatabaseUnavailable):
                # Expected operation, not a bug: nothing was committed, a retry will succeed.
                self.outages.refused(str(path), exc)
                response = database_unavailable()
            elif isinstance(exc, AgentdError) and exc.status < 500:
                response = from_error(exc)
            else:
                name = exc.driver if isinstance(exc, DatabaseError) else type(exc).__name__
                log.exception("api.unhandled", path=path, error=name)
                if isinstance(exc, AgentdError) and not isinstance(exc, DatabaseError):
                    response = from_error(exc)
                else:
                    response = internal_error()
            if not started:
                await response(scope, receive, send)


def install(app: FastAPI) -> Outages:
    """Register the handlers; the returned Outages is CatchAll's (`outages=`) too."""
    app.state.outages = Outages()
    app.add_exception_handler(AgentdError, _agentd_error)
    app.add_exception_handler(ApiProblem, _api_problem)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    outages: Outages = app.state.outages
    return outages


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries documenting problem bodies for these statuses."""
    return {
        s: {
            "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
            "description": _HTTP_TITLES.get(s, ("", "Error"))[1],
        }
        for s in statuses
    }

"""Typed exceptions of `agentd.client`, built from the API's problem+json bodies.

```
ApiError                 any answer >= 400: status, problem_type, title, detail, body
  BadRequest (400, 422)  the request is invalid; nothing changed
  Unauthorized (401) · Forbidden (403) · NotFound (404)
  Conflict (409)         e.g. pausing a finished loop, approving a denied call
  PayloadTooLarge (413) · Unavailable (503, carries retry_after)
TransportError           no answer: connection refused, timed out, dropped
```
"""

from __future__ import annotations

from typing import Any

import httpx

TYPE_BASE = "https://agentd.dev/problems/"


class ClientError(Exception):
    """agentd.client failed."""


class TransportError(ClientError):
    """The API could not be reached, or the connection broke."""


class ApiError(ClientError):
    """The API answered with an error (application/problem+json)."""

    def __init__(
        self, status: int, problem_type: str, title: str, detail: str, body: dict[str, Any]
    ) -> None:
        super().__init__(f"{status} {problem_type}: {detail}")
        self.status = status
        self.problem_type = problem_type  # the stable slug, e.g. "loop-not-found"
        self.title = title
        self.detail = detail
        self.body = body  # every member, extras included (current_status, errors, ...)


class BadRequest(ApiError):
    """400 or 422: the request is invalid; nothing changed."""


class Unauthorized(ApiError):
    """401: no token, or a wrong one."""


class Forbidden(ApiError):
    """403: the token may not do this (e.g. a read-only token writing)."""


class NotFound(ApiError):
    """404: no such loop, tool call or agent."""


class Conflict(ApiError):
    """409: the loop or call is not in a state that allows this."""


class PayloadTooLarge(ApiError):
    """413: the body is over AGENTD_MAX_BODY_BYTES."""


class Unavailable(ApiError):
    """503: the database is away for now; retry after `retry_after` seconds."""

    retry_after: float | None = None


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: BadRequest,
    503: Unavailable,
}


def from_response(response: httpx.Response) -> ApiError:
    """The typed error for an answer >= 400 (problem+json, or any other body)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"detail": response.text[:500] or response.reason_phrase}
    raw_type = str(body.get("type") or "")
    slug = raw_type.removeprefix(TYPE_BASE) if raw_type else "http-error"
    cls = _BY_STATUS.get(response.status_code, ApiError)
    err = cls(
        response.status_code,
        slug,
        str(body.get("title") or response.reason_phrase),
        str(body.get("detail") or ""),
        body,
    )
    if isinstance(err, Unavailable):
        try:
            err.retry_after = float(response.headers.get("retry-after", ""))
        except ValueError:
            err.retry_after = None
    return err

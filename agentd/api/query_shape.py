"""Query strings as strict as bodies: a scalar parameter given twice, or an integer
parameter written as anything but an integer, is a 422 (never "the last one wins", never
`after=0.0` read as 0).

FastAPI quietly keeps the last of repeated scalar parameters, and pydantic's lax mode reads
`"0.0"` as the integer 0: both accept what the OpenAPI schema says is invalid, so a client
with a bug gets an answer to a question it did not ask.
"""

from __future__ import annotations

import re
import types
import typing

from fastapi import Request
from fastapi.routing import APIRoute

from agentd.errors import InputInvalid

_INTEGER = re.compile(r"-?[0-9]+")


def _kinds(annotation: object) -> tuple[bool, bool]:
    """(is a sequence, is an integer) of a declared query parameter's type."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _kinds(args[0])
    if origin in (typing.Union, types.UnionType):
        kinds = [_kinds(a) for a in args if a is not type(None)]
        return any(k[0] for k in kinds), all(k[1] for k in kinds) and bool(kinds)
    if origin in (list, tuple, set, frozenset):
        return True, False
    return False, annotation is int


async def check(request: Request) -> None:
    """Dependency of the /v1 router: each declared query parameter is checked against its
    declared shape before the route runs (unknown parameters are left alone, as before)."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.query_params:
        return
    errors: list[dict[str, str]] = []
    for field in route.dependant.query_params:
        name = field.alias
        values = request.query_params.getlist(name)
        if not values:
            continue
        many, integer = _kinds(field.field_info.annotation)
        if len(values) > 1 and not many:
            errors.append({"field": f"query.{name}", "message": "given more than once"})
        elif integer and not all(_INTEGER.fullmatch(v) for v in values):
            errors.append({"field": f"query.{name}", "message": "must be an integer"})
    if errors:
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        raise InputInvalid(detail, errors=errors)

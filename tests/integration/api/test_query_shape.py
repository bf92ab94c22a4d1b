"""Query strings as strict as bodies, over every /v1 GET route that declares parameters."""

from __future__ import annotations

import typing

import httpx
import pytest
from fastapi import FastAPI, routing
from fastapi.routing import APIRoute

from agentd.api import query_shape


def _routes(app: FastAPI) -> list[tuple[str, str, bool, bool]]:
    found = []
    for context in routing.iter_route_contexts(app.routes):
        route, path = context.original_route, context.path or ""
        if isinstance(route, APIRoute) and path.startswith("/v1") and "GET" in route.methods:
            for field in route.dependant.query_params:
                many, integer = query_shape._kinds(field.field_info.annotation)
                found.append((path, field.alias, many, integer))
    return found


def _url(path: str) -> str:
    # Any id works: the query is checked before the route looks anything up.
    return (
        path.replace("{loop_id}", "00000000-0000-0000-0000-000000000000")
        .replace("{tool_call_id}", "1")
        .replace("{name}", "nightly")
        .replace("{delivery_id}", "1")
    )


def test_kinds_read_the_declared_types() -> None:
    assert query_shape._kinds(int) == (False, True)
    assert query_shape._kinds(int | None) == (False, True)
    assert query_shape._kinds(typing.Annotated[int | None, "x"]) == (False, True)
    assert query_shape._kinds(str | None) == (False, False)
    assert query_shape._kinds(list[str] | None) == (True, False)


async def test_a_scalar_parameter_given_twice_is_422_on_every_route(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    checked = 0
    for path, name, many, _ in _routes(app):
        if many:
            continue
        r = await client.get(_url(path), params=[(name, "1"), (name, "2")])
        assert r.status_code == 422, (path, name, r.status_code, r.text[:200])
        assert r.json()["errors"][0]["field"] == f"query.{name}"
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("bad", ["0.0", "1e3", " 5", "5 ", "+5", "0x10", "", "five"])
async def test_an_integer_parameter_takes_only_an_integer_on_every_route(
    client: httpx.AsyncClient, app: FastAPI, bad: str
) -> None:
    checked = 0
    for path, name, _, integer in _routes(app):
        if not integer:
            continue
        r = await client.get(_url(path), params={name: bad})
        assert r.status_code == 422, (path, name, bad, r.status_code, r.text[:200])
        checked += 1
    assert checked >= 3


async def test_the_fuzzers_finding_on_the_event_feed_is_refused(
    client: httpx.AsyncClient,
) -> None:
    r = await client.get("/v1/events", params=[("after", "0.0"), ("types", ""), ("types", "x")])
    assert r.status_code == 422
    assert {e["field"] for e in r.json()["errors"]} == {"query.after", "query.types"}
    assert (await client.get("/v1/events", params={"after": "0"})).status_code == 200

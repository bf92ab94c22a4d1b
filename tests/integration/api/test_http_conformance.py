"""HTTP conformance over every route of the app, not one example: `Allow` on a 405 names
every method the path takes; HEAD answers wherever GET does, without a body; booleans and
integers of request bodies are strict; every integer bound in /openapi.json is an int the
API accepts at the bound and refuses past it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, routing
from pydantic import BaseModel

from agentd.db.pool import Pool, transaction
from agentd.testing import factories

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


@pytest.fixture
async def ids(pool: Pool) -> dict[str, str]:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="completed")
        call = await factories.tool_call(conn, loop, name="add", arguments={"a": 1})
    return {
        "loop_id": str(loop.id),
        "tool_call_id": str(call.id),
        "message_id": str(call.message_id),
        "name": "nightly",
        "action": "pause",
        "inbound_id": "1",
        "delivery_id": "1",
        "agent": "calc",
    }


def _fill(template: str, ids: dict[str, str]) -> str:
    for key, value in ids.items():
        template = template.replace("{" + key + "}", value)
    assert "{" not in template, template
    return template


def _paths(app: FastAPI) -> dict[str, set[str]]:
    """Every route path and the methods declared on it (routes sharing a path merged)."""
    out: dict[str, set[str]] = {}
    for ctx in routing.iter_route_contexts(app.routes):
        if ctx.methods:
            out.setdefault(ctx.path_format, set()).update(ctx.methods)
    return out


async def test_a_405_lists_every_method_of_the_path(
    app: FastAPI, client: httpx.AsyncClient, ids: dict[str, str]
) -> None:
    paths = _paths(app)
    assert paths["/v1/loops/{loop_id}/messages"] == {"GET", "POST"}
    tried = 0
    for template, declared in paths.items():
        expected = declared | ({"HEAD"} if "GET" in declared else set())
        for method in set(METHODS) - declared:
            r = await client.request(method, _fill(template, ids))
            assert r.status_code == 405, (method, template, r.status_code)
            assert set(r.headers["allow"].split(", ")) == expected, (method, template)
            assert r.headers["content-type"].startswith("application/problem+json")
            assert r.headers["x-frame-options"] == "DENY"
            tried += 1
    assert tried > 100


async def test_head_answers_like_get_without_a_body_on_every_get_route(
    app: FastAPI, client: httpx.AsyncClient, ids: dict[str, str]
) -> None:
    gets = [t for t, methods in _paths(app).items() if "GET" in methods]
    assert "/v1/loops/{loop_id}/stream" in gets and "/healthz" in gets
    for template in gets:
        path = _fill(template, ids)
        head = await client.head(path)
        assert head.status_code != 405, template
        assert head.content == b"", template
        if template.endswith("/stream"):  # a live stream: HEAD must end, not hang
            assert head.status_code in (200, 404), template
            continue
        get = await client.get(path)
        assert head.status_code == get.status_code, template
        assert head.headers.get("content-type") == get.headers.get("content-type"), template
        assert head.headers.get("location") == get.headers.get("location"), template
    r = await client.head("/v1/nope")
    assert r.status_code == 404 and r.content == b""


async def test_head_is_read_only_for_a_read_token(
    app: FastAPI, make_client: Any, ids: dict[str, str]
) -> None:
    from tests.integration.api.conftest import READ_TOKEN

    async with make_client(app, READ_TOKEN) as reader:
        assert (await reader.head(f"/v1/loops/{ids['loop_id']}")).status_code == 200
        assert (await reader.post(f"/v1/loops/{ids['loop_id']}/pause")).status_code == 403
    async with make_client(app, None) as anonymous:
        assert (await anonymous.head(f"/v1/loops/{ids['loop_id']}")).status_code == 401


def _body_models(app: FastAPI) -> list[tuple[str, str, type[BaseModel]]]:
    out = []
    for ctx in routing.iter_route_contexts(app.routes):
        route = ctx.original_route
        if not isinstance(route, routing.APIRoute) or route.body_field is None:
            continue
        annotation = route.body_field.field_info.annotation
        for candidate in (annotation, *getattr(annotation, "__args__", ())):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                out += [(m, ctx.path_format, candidate) for m in sorted(ctx.methods or ())]
    return out


def _kinds(model: type[BaseModel]) -> dict[str, str]:
    """Body keys whose schema is a boolean or an integer (possibly nullable)."""
    out: dict[str, str] = {}
    for key, prop in model.model_json_schema(by_alias=True).get("properties", {}).items():
        types = {prop.get("type")} | {o.get("type") for o in prop.get("anyOf", [])}
        for kind in ("boolean", "integer"):
            if kind in types:
                out[key] = kind
    return out


async def test_booleans_and_integers_of_every_body_are_strict(
    app: FastAPI, client: httpx.AsyncClient, ids: dict[str, str]
) -> None:
    wrong = {"boolean": [0, 1, "true", "false", "yes"], "integer": [True, False, "5", 5.5]}
    seen: set[str] = set()
    for method, template, model in _body_models(app):
        for key, kind in _kinds(model).items():
            seen.add(f"{model.__name__}.{key}")
            for value in wrong[kind]:
                r = await client.request(method, _fill(template, ids), json={key: value})
                assert r.status_code == 422, (template, key, value, r.status_code)
                fields = [e["field"] for e in r.json()["errors"]]
                assert any(f.startswith(f"body.{key}") for f in fields), (template, key, fields)
    assert {"Observe.observed", "CreateSchedule.enabled", "AtMessage.message_id"} <= seen
    r = await client.post(f"/v1/loops/{ids['loop_id']}/observe", json={"observed": False})
    assert r.status_code == 200 and r.json()["observed"] is False


_BOUND_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _bounded(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The integer schema (itself or a branch of anyOf) carrying bounds, if any."""
    for s in (schema, *schema.get("anyOf", [])):
        if s.get("type") == "integer" and any(k in s for k in _BOUND_KEYS):
            return s
    return None


def _bounds(spec: dict[str, Any]) -> list[tuple[str, str, str, str, str, int]]:
    """(method, path, where, name, bound key, value) for every bounded integer input."""
    schemas = spec["components"]["schemas"]
    out = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            for p in op.get("parameters", []):
                s = _bounded(p["schema"])
                for key in _BOUND_KEYS if s else ():
                    if key in s:  # type: ignore[operator]
                        out.append((method, path, p["in"], p["name"], key, s[key]))  # type: ignore[index]
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            ref = body.get("schema", {})
            ref = next((o for o in ref.get("anyOf", [ref]) if "$ref" in o), {})
            if "$ref" not in ref:
                continue
            model = schemas[ref["$ref"].rsplit("/", 1)[1]]
            for name, prop in model.get("properties", {}).items():
                s = _bounded(prop)
                for key in _BOUND_KEYS if s else ():
                    if key in s:  # type: ignore[operator]
                        out.append((method, path, "body", name, key, s[key]))  # type: ignore[index]
    return out


async def test_every_integer_bound_in_openapi_is_an_int_accepted_at_the_bound(
    client: httpx.AsyncClient, ids: dict[str, str]
) -> None:
    spec = (await client.get("/openapi.json")).json()
    found = _bounds(spec)
    assert ("post", "/v1/loops/{loop_id}/fork", "body", "message_id", "maximum", 2**63 - 1) in found
    for method, path, where, name, key, bound in found:
        assert type(bound) is int, (path, name, key, bound)
        inside = bound + (1 if key.startswith("exclusiveMin") else 0)
        inside -= 1 if key.startswith("exclusiveMax") else 0
        outside = inside + (1 if "ax" in key else -1)
        for value, refused in ((inside, False), (outside, True)):
            target, kw = _fill(path, ids | {"tool_call_id": ids["tool_call_id"]}), {}
            if where == "path":
                target = _fill(path, {**ids, name: str(value)})
            elif where == "query":
                kw = {"params": {name: str(value)}}
            else:
                kw = {"content": json.dumps({name: value})}
            r = await client.request(
                method.upper(), target, headers={"content-type": "application/json"}, **kw
            )
            named = r.status_code == 422 and any(
                e["field"].endswith(name) or f".{name}" in e["field"]
                for e in r.json().get("errors", [])
            )
            assert named is refused, (method, path, name, value, r.status_code, r.text[:300])


async def test_head_on_a_live_stream_ends_at_once_and_unsubscribes(
    app: FastAPI, client: httpx.AsyncClient, pool: Pool
) -> None:
    from agentd.testing.engine import eventually

    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="queued")  # a GET would stay open
    r = await asyncio.wait_for(client.head(f"/v1/loops/{loop.id}/stream"), timeout=10)
    assert r.status_code == 200 and r.content == b""
    assert r.headers["content-type"].startswith("text/event-stream")

    async def unsubscribed() -> bool:
        return app.state.stream_hub.subscribers() == 0

    await eventually(unsubscribed)


async def test_head_on_a_live_stream_ends_over_real_http(
    app: FastAPI, pool: Pool, live_server: Any
) -> None:
    from agentd.testing.engine import eventually
    from tests.integration.api.conftest import TOKEN

    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="queued")
    async with live_server(app) as base, httpx.AsyncClient(base_url=base, timeout=10) as c:
        r = await c.head(
            f"/v1/loops/{loop.id}/stream", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert r.status_code == 200 and r.content == b""

        async def unsubscribed() -> bool:
            return app.state.stream_hub.subscribers() == 0

        await eventually(unsubscribed)
        r = await c.head("/healthz")  # the kept-alive connection still serves
        assert r.status_code == 200

from __future__ import annotations

import re
import uuid

import httpx
import pytest
from fastapi import FastAPI
from starlette.routing import Mount, Route

from agentd.api.state import AppState
from agentd.app import create_app

PUBLIC = {"/healthz", "/readyz"}
# The admin login form and its static assets are reachable without a token by design.
ADMIN_PUBLIC = {
    ("GET", "/admin/login"),
    ("POST", "/admin/login"),
    ("POST", "/admin/logout"),
    ("GET", "/admin/static/"),
    ("GET", "/"),  # a redirect to /admin, which asks for a session
}


def _concrete(path: str) -> str:
    # Fill path params with well-formed values: auth must refuse before anything is looked up.
    path = path.replace("{loop_id}", str(uuid.uuid4())).replace("{tool_call_id}", "1")
    return re.sub(r"\{[^}]+\}", "x", path)


def _routes(app: FastAPI) -> list[tuple[object, str, set[str] | None]]:
    """(route, path, methods) of every effective route, included routers flattened."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # FastAPI before lazily included routers
        return [(r, r.path, getattr(r, "methods", None)) for r in app.routes]  # type: ignore[attr-defined]
    return [(c.original_route, c.path, c.methods) for c in iter_route_contexts(app.routes)]


def every_endpoint(app: FastAPI) -> list[tuple[str, str]]:
    out = []
    for route, path, methods in _routes(app):
        if isinstance(route, Mount):
            out.append(("GET", path.rstrip("/") + "/"))
        elif isinstance(route, Route) or methods:
            out += [(m, path) for m in sorted(methods or {"GET"}) if m != "HEAD"]
        else:
            raise AssertionError(f"unknown route type {route!r}: teach this test about it")
    return out


async def test_every_route_but_the_probes_refuses_a_missing_or_wrong_token(
    app: FastAPI, make_client
) -> None:  # type: ignore[no-untyped-def]
    endpoints = every_endpoint(app)
    paths = {p for _, p in endpoints}
    assert {"/v1/loops", "/metrics", "/openapi.json", "/docs"} <= paths
    checked = 0
    for token in (None, "wrong-token"):
        async with make_client(app, token) as c:
            for method, path in endpoints:
                r = await c.request(method, _concrete(path), json={} if method == "POST" else None)
                if path in PUBLIC:
                    assert r.status_code in (200, 503), (method, path)
                    continue
                if (method, path) in ADMIN_PUBLIC:
                    continue
                if path.startswith("/mcp/"):
                    # MCP mounts answer with their own fail-closed authorizer (not problem+json).
                    r = await c.post(path, json={})
                    assert r.status_code == 401, (path, r.status_code)
                    continue
                assert r.status_code == 401, (method, path, r.status_code)
                assert r.headers["www-authenticate"].startswith("Bearer")
                assert r.headers["content-type"] == "application/problem+json"
                assert "wrong-token" not in r.text
                checked += 1
    assert checked >= 2 * 18


@pytest.fixture
def read_token() -> str:
    return "read-only-token-for-tests"


async def test_read_only_token_gets_403_on_every_mutation(
    app: FastAPI, make_client, client: httpx.AsyncClient, read_token: str
) -> None:  # type: ignore[no-untyped-def]
    loop = (await client.post("/v1/loops", json={"agent": "calc", "message": "hi"})).json()
    async with make_client(app, read_token) as ro:
        assert (await ro.get("/v1/loops")).status_code == 200
        assert (await ro.get(f"/v1/loops/{loop['id']}")).status_code == 200
        assert (await ro.get("/metrics")).status_code == 200
        for method, path in every_endpoint(app):
            if method in ("GET", "OPTIONS") or (method, path) in ADMIN_PUBLIC:
                continue
            r = await ro.request(method, _concrete(path).replace("{loop_id}", loop["id"]), json={})
            assert r.status_code == 403, (method, path)
            assert r.json()["type"].endswith("/forbidden")
    assert (await client.get(f"/v1/loops/{loop['id']}")).json()["status"] == "queued"


async def test_metrics_can_be_public(app_state: AppState, make_client) -> None:  # type: ignore[no-untyped-def]
    app_state.settings.metrics_public = True
    app = create_app(app_state)
    async with make_client(app, None) as anon:
        r = await anon.get("/metrics")
        assert r.status_code == 200 and "agentd_loops" in r.text
        assert (await anon.get("/v1/loops")).status_code == 401

"""Trust boundaries of the control plane: every route of the FULL app (REST, docs, metrics,
admin, MCP mounts) refuses a missing or wrong token except the health probes; MCP mounts
fail closed with their own authorizer; admin actions need the CSRF token; tokens are
compared in constant time; the container runs as a non-root user."""

from __future__ import annotations

import inspect
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.routing import Mount, Route

from agentd.api import auth as api_auth
from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool, connection
from agentd.mcp import mounts
from agentd.mcp.toolset import Toolset
from agentd.store import loops
from agentd.testing import agents
from agentd.testing.engine import fast_settings

ROOT = Path(__file__).parents[3]
TOKEN = f"operator-{uuid.uuid4().hex}"
READER = f"reader-{uuid.uuid4().hex}"
MCP_TOKEN = f"mcp-{uuid.uuid4().hex}"
PROBES = {"/healthz", "/readyz"}
ADMIN_PUBLIC = {
    ("GET", "/admin/login"),
    ("POST", "/admin/login"),
    ("POST", "/admin/logout"),
    ("GET", "/admin/static/"),
}
tools = Toolset("guarded", version="1.0.0")


@tools.tool(description="Echo")
def echo(text: str) -> str:
    return text


def authorizer(token: str | None, request: Any) -> str | None:
    return "ok" if token == MCP_TOKEN else None


MOUNT = {
    "toolset": "test_security_boundaries:tools",
    "authorizer": "test_security_boundaries:authorizer",
}


@pytest.fixture
def state(pool: Pool, database_url: str) -> AppState:
    registry = agents.registry()
    settings = fast_settings(read_tokens=[READER], mcp_servers={"guarded": MOUNT})
    return AppState.create(
        settings=settings,
        pool=pool,
        registry=registry,
        database_url=database_url,
        api_token=TOKEN,
    )


@pytest.fixture
def app(state: AppState) -> FastAPI:
    return create_app(state)


@pytest.fixture
async def anon(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8080"
    ) as c:
        yield c


def endpoints(app: FastAPI) -> list[tuple[str, str]]:
    try:
        from fastapi.routing import iter_route_contexts

        found = [(c.original_route, c.path, c.methods) for c in iter_route_contexts(app.routes)]
    except ImportError:
        found = [(r, r.path, getattr(r, "methods", None)) for r in app.routes]  # type: ignore[attr-defined]
    out: list[tuple[str, str]] = []
    for route, path, methods in found:
        if isinstance(route, Mount):
            out.append(("GET", path.rstrip("/") + "/"))
        elif isinstance(route, Route) or methods:
            out += [(m, path) for m in sorted(methods or {"GET"}) if m != "HEAD"]
        else:
            raise AssertionError(f"unknown route type {route!r}: teach this test about it")
    return out


def concrete(path: str) -> str:
    path = path.replace("{loop_id}", str(uuid.uuid4())).replace("{tool_call_id}", "1")
    return re.sub(r"\{[^}]+\}", "x", path)


async def test_every_route_of_the_full_app_refuses_a_missing_or_wrong_token(
    app: FastAPI, anon: httpx.AsyncClient
) -> None:
    eps = endpoints(app)
    paths = {p for _, p in eps}
    assert {"/v1/loops", "/metrics", "/openapi.json"} <= paths
    assert any(p.startswith("/mcp/guarded") for p in paths), paths
    assert any(p.startswith("/admin") for p in paths), paths
    checked = 0
    for header in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {TOKEN}x"}):
        for method, path in eps:
            url = concrete(path)
            r = await anon.request(
                method, url, json={} if method == "POST" else None, headers=header
            )
            if path in PROBES:
                assert r.status_code in (200, 503)
            elif path.startswith("/.well-known/oauth-protected-resource/"):
                # RFC 9728 metadata is public by design: it says how to authenticate.
                assert r.status_code == 200 and "resource" in r.json()
                assert TOKEN not in r.text
            elif path == "/":  # the entry redirect: it carries nothing, and lands on a login
                assert r.status_code in (307, 405), (method, r.status_code)
                assert r.headers.get("location", "/admin") == "/admin", r.headers
            elif (method, path) in ADMIN_PUBLIC:
                continue
            elif path.startswith("/mcp/"):
                for m in ("POST", "GET", "DELETE"):
                    r = await anon.request(m, path.rstrip("/"), json={}, headers=header)
                    assert r.status_code == 401, (m, path, r.status_code)
            else:
                assert r.status_code in (401, 303), (method, path, r.status_code)
                if r.status_code == 303:  # an admin page sends the browser to the login form
                    assert r.headers["location"].startswith("/admin/login")
                assert TOKEN not in r.text and "wrong" not in r.headers.get("location", "")
            checked += 1
    assert checked >= 3 * 20


async def test_a_read_token_cannot_mutate_and_cannot_open_an_mcp_mount(
    app: FastAPI, anon: httpx.AsyncClient
) -> None:
    headers = {"Authorization": f"Bearer {READER}"}
    for method, path in endpoints(app):
        if method != "POST" or not path.startswith("/v1/"):
            continue
        r = await anon.post(concrete(path), json={}, headers=headers)
        assert r.status_code == 403, (path, r.status_code, r.text)
    for token in (READER, TOKEN):  # API tokens are not MCP credentials
        r = await anon.post("/mcp/guarded", json={}, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 401


def test_an_mcp_mount_without_an_authorizer_is_refused() -> None:
    with pytest.raises(Exception, match="authorizer"):
        mounts.McpMount(toolset=tools, authorizer=None)  # type: ignore[arg-type]


async def test_admin_actions_need_the_csrf_token(
    app: FastAPI, anon: httpx.AsyncClient, state: AppState
) -> None:
    from agentd.admin import auth as admin_auth

    cookie = admin_auth.issue(state, TOKEN)
    assert cookie is not None
    session = admin_auth.verify(state, cookie)
    assert session is not None and session.csrf
    loop = await state.lifecycle.start(agent="calc", message="hi", state={"llm": "http://x"})
    anon.cookies.set(admin_auth.COOKIE, cookie)
    url = f"/admin/loops/{loop.id}/actions/pause"
    tampered = session.csrf[:-1] + ("1" if session.csrf.endswith("0") else "0")
    for given in ({}, {"X-CSRF-Token": "nope"}, {"X-CSRF-Token": tampered}):
        r = await anon.post(url, headers=given)
        assert r.status_code == 403, (given, r.status_code)
        r = await anon.post(url, data={"csrf": given.get("X-CSRF-Token", "")})
        assert r.status_code == 403
    async with connection(state.pool) as conn:
        row = await loops.get(conn, loop_id=loop.id)
    assert row is not None and row.status != "paused"  # the refused actions changed nothing
    r = await anon.post(url, headers={"X-CSRF-Token": session.csrf})
    assert r.status_code < 400 or r.status_code == 409, (r.status_code, r.text[:300])


def test_tokens_are_compared_in_constant_time() -> None:
    from agentd.admin import auth as admin_auth

    for module in (api_auth, admin_auth, mounts):
        source = inspect.getsource(module)
        assert "hmac.compare_digest" in source, module.__name__
        # No token or secret compared with == / != anywhere.
        plain = re.findall(r"(?:token|secret|csrf|mac)\w*\s*[!=]=\s*\w", source, flags=re.I)
        plain = [p for p in plain if "None" not in p]
        assert plain == [], (module.__name__, plain)


def test_the_container_runs_as_a_non_root_user() -> None:
    dockerfile = ROOT / "Dockerfile"
    if not dockerfile.exists():
        pytest.skip("no Dockerfile yet")
    users = re.findall(r"^USER\s+(\S+)", dockerfile.read_text(), flags=re.M)
    assert users, "the Dockerfile sets no USER: it would run as root"
    final = users[-1].split(":")[0]
    assert final not in ("root", "0"), users

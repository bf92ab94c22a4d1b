"""Admin auth: login form → signed cookie, bearer tokens, refusals, CSRF, logout."""

from __future__ import annotations

import re
import uuid

import pytest
from admin_kit import READ_TOKEN, TOKEN, Browser, anonymous, login
from fastapi import FastAPI
from pydantic import SecretStr
from starlette.routing import Mount

from agentd.admin import auth
from agentd.api.state import AppState
from agentd.db.pool import Pool, connection
from agentd.store import loops

PUBLIC = {("GET", "/admin/login"), ("POST", "/admin/login"), ("POST", "/admin/logout")}


def _routes(app: FastAPI) -> list[tuple[object, str, set[str] | None]]:
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # FastAPI before lazily included routers
        return [(r, r.path, getattr(r, "methods", None)) for r in app.routes]  # type: ignore[attr-defined]
    return [(c.original_route, c.path, c.methods) for c in iter_route_contexts(app.routes)]


def admin_routes(app: FastAPI) -> list[tuple[str, str]]:
    out = []
    for route, path, methods in _routes(app):
        if not path.startswith("/admin") or isinstance(route, Mount):
            continue
        for method in sorted(methods or {"GET"}):
            if method != "HEAD" and (method, path) not in PUBLIC:
                out.append((method, path))
    return out


def concrete(path: str) -> str:
    path = path.replace("{loop_id}", str(uuid.uuid4()))
    return re.sub(r"\{[^}]+\}", "1", path)


async def test_login_sets_an_httponly_strict_cookie_that_is_not_the_token(app: FastAPI) -> None:
    async with anonymous(app) as c:
        r = await login(c, TOKEN)
        assert r.status_code == 303 and r.headers["location"] == "/admin"
        cookie = next(h for h in r.headers.get_list("set-cookie") if h.startswith("agentd_admin="))
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/admin" in cookie
        assert TOKEN not in cookie
        page = await c.get("/admin")
        assert page.status_code == 200 and "Dashboard" in page.text


async def test_a_wrong_token_shows_the_form_again_and_sets_no_session(app: FastAPI) -> None:
    async with anonymous(app) as c:
        r = await login(c, "not-" + TOKEN)
        assert r.status_code == 401 and "not valid" in r.text
        assert "agentd_admin" not in c.cookies
        assert (await c.get("/admin")).status_code == 401


async def test_login_without_the_form_nonce_is_refused(app: FastAPI) -> None:
    async with anonymous(app) as c:
        r = await c.post("/admin/login", data={"token": TOKEN, "nonce": "0" * 32})
        assert r.status_code == 403
        assert "agentd_admin" not in c.cookies


async def test_login_redirects_only_inside_the_admin(app: FastAPI) -> None:
    async with anonymous(app) as c:
        page = await c.get("/admin/login", params={"next": "//evil.example/admin"})
        nonce = re.search(r'name="nonce" value="([0-9a-f]+)"', page.text)
        assert nonce
        r = await c.post(
            "/admin/login",
            data={"token": TOKEN, "nonce": nonce.group(1), "next": "//evil.example/admin"},
        )
        assert r.headers["location"] == "/admin"


async def test_a_browser_without_a_session_is_sent_to_the_login_form(app: FastAPI) -> None:
    async with anonymous(app, accept="text/html") as c:
        r = await c.get("/admin/loops?status=failed")
        assert r.status_code == 303
        assert r.headers["location"] == "/admin/login?next=/admin/loops%3Fstatus%3Dfailed"


async def test_every_admin_route_refuses_missing_wrong_and_forged_credentials(
    app: FastAPI,
) -> None:
    endpoints = admin_routes(app)
    assert len(endpoints) >= 15
    assert ("GET", "/admin/loops/{loop_id}/stream") in endpoints
    forged = "operator." + "0" * 32 + ".9999999999." + "1" * 32 + "." + "2" * 64
    for headers, cookies in (
        ({}, {}),
        ({"authorization": "Bearer wrong-token"}, {}),
        ({}, {"agentd_admin": forged}),
        ({}, {"agentd_admin": TOKEN}),  # the raw token is not a session
    ):
        async with anonymous(app, **headers) as c:
            c.cookies.update(cookies)
            for method, path in endpoints:
                r = await c.request(method, concrete(path), data={"csrf": "x"})
                assert r.status_code == 401, (method, path, headers, cookies)
                assert r.headers["content-type"] == "application/problem+json"
                assert r.headers["www-authenticate"].startswith("Bearer")
                assert "wrong-token" not in r.text


async def test_the_read_only_token_views_everything_and_acts_on_nothing(
    app: FastAPI, reader: Browser, app_state: AppState, pool: Pool
) -> None:
    loop = await app_state.lifecycle.start(agent="calc", message="hi")
    page = await reader.get(f"/admin/loops/{loop.id}")
    assert page.status_code == 200 and "reader" in page.text
    assert "data-action=" not in page.text  # no action buttons at all
    assert (await reader.get("/admin")).status_code == 200
    for method, path in admin_routes(app):
        if method != "POST":
            continue
        r = await reader.post(concrete(path).replace("{loop_id}", str(loop.id)))
        assert r.status_code == 403, (method, path)
        assert "read-only" in r.text
    r = await reader.post(f"/admin/loops/{loop.id}/actions/stop")
    assert r.status_code == 403
    async with anonymous(app, authorization=f"Bearer {READ_TOKEN}") as c:
        r = await c.post(f"/admin/loops/{loop.id}/actions/stop")
        assert r.status_code == 403 and r.json()["type"].endswith("/forbidden")
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop.id)
    assert row is not None and row.status == "queued"


async def test_every_post_needs_the_sessions_csrf_token(
    app: FastAPI, operator: Browser, app_state: AppState, pool: Pool
) -> None:
    loop = await app_state.lifecycle.start(agent="calc", message="hi")
    await operator.get("/admin")
    posts = [p for m, p in admin_routes(app) if m == "POST"] + ["/admin/logout"]
    for path in posts:
        url = concrete(path.replace("{loop_id}", str(loop.id)).replace("{action}", "stop"))
        for data in ({}, {"csrf": "0" * 32}, {"csrf": ""}):
            r = await operator.client.post(url, data=data)
            assert r.status_code == 403, (url, data)
            assert "CSRF" in r.text
        r = await operator.client.post(url, headers={"x-csrf-token": "bad"})
        assert r.status_code == 403
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop.id)
    assert row is not None and row.status == "queued"
    # And with the token, it works.
    r = await operator.post(f"/admin/loops/{loop.id}/actions/stop")
    assert await operator.flash(r) == "ok: Stopped."


async def test_the_operator_bearer_token_acts_without_a_csrf_token(
    app: FastAPI, app_state: AppState
) -> None:
    loop = await app_state.lifecycle.start(agent="calc", message="hi")
    async with anonymous(app, authorization=f"Bearer {TOKEN}") as c:
        r = await c.post(f"/admin/loops/{loop.id}/actions/pause")
        assert r.status_code == 303


async def test_logout_ends_the_session(app: FastAPI, operator: Browser) -> None:
    assert (await operator.get("/admin")).status_code == 200
    r = await operator.post("/admin/logout")
    assert r.status_code == 303 and r.headers["location"] == "/admin/login"
    assert "agentd_admin" not in operator.client.cookies
    assert (await operator.client.get("/admin")).status_code == 401


@pytest.fixture
def fresh_state(app_state: AppState) -> AppState:
    return app_state


def test_a_session_expires_and_dies_with_its_token(fresh_state: AppState) -> None:
    value = auth.issue(fresh_state, READ_TOKEN, now=1_000)
    assert value is not None
    session = auth.verify(fresh_state, value, now=1_001)
    assert session is not None and session.role == "reader" and not session.can_act
    assert auth.verify(fresh_state, value, now=1_000 + auth.SESSION_SECONDS + 1) is None
    # A tampered role does not verify.
    assert auth.verify(fresh_state, value.replace("reader", "operator", 1), now=1_001) is None
    # Removing the read token ends its sessions.
    fresh_state.settings.read_tokens = [SecretStr("another-token")]
    assert auth.verify(fresh_state, value, now=1_001) is None
    assert auth.issue(fresh_state, READ_TOKEN) is None

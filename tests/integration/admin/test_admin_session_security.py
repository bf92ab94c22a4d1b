"""Logging out ends the session on the server (a copied cookie stops working), and no admin
page may be framed by another site."""

from __future__ import annotations

from admin_kit import TOKEN, Browser, anonymous, login
from fastapi import FastAPI, routing

from agentd.admin import auth


async def test_logout_revokes_the_session_for_a_copied_cookie(
    app: FastAPI, operator: Browser
) -> None:
    cookie = operator.client.cookies[auth.COOKIE]
    thief = anonymous(app)
    thief.cookies.set(auth.COOKIE, cookie, path="/admin")
    assert (await thief.get("/admin/loops")).status_code == 200

    await operator.get("/admin")
    r = await operator.post("/admin/logout")
    assert r.status_code == 303

    for c in (thief, operator.client):
        c.cookies.set(auth.COOKIE, cookie, path="/admin")
        r = await c.get("/admin/loops", headers={"accept": "text/html"})
        assert r.status_code == 303 and r.headers["location"].startswith("/admin/login")
        r = await c.get("/admin/loops")
        assert r.status_code == 401
        r = await c.post("/admin/loops/00000000-0000-0000-0000-000000000000/actions/pause")
        assert r.status_code == 401


async def test_logout_ends_only_that_session(app: FastAPI, operator: Browser) -> None:
    other = anonymous(app)
    assert (await login(other, TOKEN)).status_code == 303
    await operator.get("/admin")
    assert (await operator.post("/admin/logout")).status_code == 303
    assert (await other.get("/admin/loops")).status_code == 200


async def test_a_revoked_cookie_cannot_log_out_or_act_again(
    app: FastAPI, operator: Browser
) -> None:
    await operator.get("/admin")
    csrf, cookie = operator.csrf, operator.client.cookies[auth.COOKIE]
    assert (await operator.post("/admin/logout")).status_code == 303
    replay = anonymous(app)
    replay.cookies.set(auth.COOKIE, cookie, path="/admin")
    r = await replay.post("/admin/loops", data={"csrf": csrf, "agent": "calc", "message": "hi"})
    assert r.status_code == 401


def _admin_get_paths(app: FastAPI) -> list[str]:
    paths = []
    for ctx in routing.iter_route_contexts(app.routes):
        if "GET" in (ctx.methods or ()) and ctx.path_format.startswith("/admin"):
            paths.append(
                ctx.path_format.replace(
                    "{loop_id}", "00000000-0000-0000-0000-000000000000"
                ).replace("{inbound_id}", "1")
            )
    return paths


async def test_no_admin_page_can_be_framed(app: FastAPI, operator: Browser) -> None:
    paths = [*_admin_get_paths(app), "/admin/static/admin.css", "/admin/nope"]
    assert "/admin/loops" in paths and "/admin/login" in paths
    for path in paths:
        if path.endswith("/stream"):
            continue  # an SSE response: its headers are checked below with HEAD
        for c in (operator.client, anonymous(app)):
            r = await c.get(path)
            assert r.headers["x-frame-options"] == "DENY", path
            csp = r.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp, path
            assert r.headers["x-content-type-options"] == "nosniff", path
    r = await operator.client.head("/admin/loops/00000000-0000-0000-0000-000000000000/stream")
    assert r.headers["x-frame-options"] == "DENY"

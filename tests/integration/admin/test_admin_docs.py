"""The root and the API explorer from a browser: / goes to the admin UI, /docs works with
the admin session."""

from __future__ import annotations

from admin_kit import TOKEN, Browser, anonymous
from fastapi import FastAPI

HTML = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


async def test_the_root_redirects_to_the_admin_ui(app: FastAPI) -> None:
    async with anonymous(app) as c:
        r = await c.get("/")
    assert r.status_code == 307 and r.headers["location"] == "/admin"


async def test_a_browser_on_docs_is_sent_to_the_admin_copy_and_to_login_first(
    app: FastAPI,
) -> None:
    async with anonymous(app, **HTML) as c:
        r = await c.get("/docs")
        assert r.status_code == 303 and r.headers["location"] == "/admin/docs"
        r = await c.get("/admin/docs")
        assert r.status_code == 303 and r.headers["location"].startswith("/admin/login")
    async with anonymous(app) as c:
        assert (await c.get("/admin/openapi.json")).status_code == 401


async def test_a_logged_in_browser_reads_the_api_docs(app: FastAPI, reader: Browser) -> None:
    r = await reader.get("/docs", headers=HTML, follow_redirects=True)
    assert r.status_code == 200 and "swagger" in r.text.lower()
    assert "/admin/openapi.json" in r.text
    spec = await reader.get("/admin/openapi.json")
    assert spec.status_code == 200 and "/v1/loops" in spec.json()["paths"]
    page = await reader.get("/admin")
    assert 'href="/admin/docs"' in page.text


async def test_scripts_keep_the_bearer_docs(app: FastAPI) -> None:
    async with anonymous(app, Authorization=f"Bearer {TOKEN}", **HTML) as c:
        r = await c.get("/docs")
        assert r.status_code == 200 and "'/openapi.json'" in r.text
    async with anonymous(app) as c:
        r = await c.get("/docs")
        assert r.status_code == 401 and r.headers["content-type"] == "application/problem+json"

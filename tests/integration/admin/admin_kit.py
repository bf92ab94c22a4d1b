"""Helpers of the admin tests: clients, login, a browser-like form poster."""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI

import agentd.admin
from agentd.api.state import AppState
from agentd.app import create_app

TOKEN = "operator-token-for-admin-tests"
READ_TOKEN = "read-only-token-for-admin-tests"
BASE = "http://agentd.test"
_CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')
_NONCE = re.compile(r'name="nonce" value="([0-9a-f]+)"')


def build_app(state: AppState) -> FastAPI:
    app = create_app(state)
    agentd.admin.mount(app, state)
    return app


def anonymous(app: FastAPI, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE, headers=headers)


def csrf_of(html: str) -> str:
    m = _CSRF.search(html)
    assert m, "no CSRF token on the page"
    return m.group(1)


async def login(c: httpx.AsyncClient, token: str) -> httpx.Response:
    page = await c.get("/admin/login")
    nonce = _NONCE.search(page.text)
    assert nonce
    return await c.post("/admin/login", data={"token": token, "nonce": nonce.group(1)})


class Browser:
    """A logged-in client that posts forms with the page's CSRF token, like a browser."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.csrf = ""

    async def get(self, url: str, **kw: object) -> httpx.Response:
        r = await self.client.get(url, **kw)  # type: ignore[arg-type]
        m = _CSRF.search(r.text)
        if m:
            self.csrf = m.group(1)
        return r

    async def post(self, url: str, data: dict[str, str] | None = None) -> httpx.Response:
        if not self.csrf:
            await self.get("/admin")
        return await self.client.post(url, data={"csrf": self.csrf, **(data or {})})

    async def flash(self, response: httpx.Response) -> str:
        """Follow an action's 303 and return the flash message shown."""
        assert response.status_code == 303, (response.status_code, response.text[:500])
        page = await self.get(response.headers["location"])
        m = re.search(r'class="flash flash-(\w+)"[^>]*>(.*?)</div>', page.text, re.S)
        assert m, "no flash on the page"
        return f"{m.group(1)}: {html.unescape(m.group(2).strip())}"


@contextlib.asynccontextmanager
async def serve(app: FastAPI) -> AsyncIterator[str]:
    """Serve `app` with uvicorn on a free local port."""
    import uvicorn

    from agentd.testing.engine import eventually

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[no-untyped-def,override]
            yield

    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_config=None, access_log=False, lifespan="off"
    )
    server = Server(config)
    task = asyncio.create_task(server.serve())

    async def started() -> bool:
        return bool(server.started)

    await eventually(started, within=10)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=10)

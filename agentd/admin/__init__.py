"""The admin UI at /admin: see and steer every loop from a browser.

`mount(app, state)` adds it to an app made by `agentd.api.app.create_api`, as
`agentd.app.create_app` does (the admin imports the API, never the reverse). Server-rendered
(Jinja2), a little vanilla JS for the live loop page, no build step, no CDN.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.applications import Starlette

from agentd.admin import (
    api_docs,
    auth,
    children,
    dashboard,
    forms,
    inspector,
    live,
    login,
    loop_actions,
    loops,
    render,
    webhooks,
)
from agentd.api.state import AppState

PREFIX = "/admin"


def mount(app: FastAPI, state: AppState) -> None:
    """Serve the admin UI under /admin. Public: /admin/login and /admin/static/*; every
    other route needs an admin session (cookie) or the API's bearer token."""
    app.state.admin_hub = live.Hub(state.database_url)
    app.add_exception_handler(auth.AdminDenied, render.on_denied)
    app.add_exception_handler(forms.FormInvalid, render.on_invalid)

    # Input is cleaned after auth, so an anonymous caller learns nothing from it.
    app.include_router(login.router, dependencies=[Depends(forms.clean_input)])
    private_routers = (
        api_docs.router,
        dashboard.router,
        loops.router,
        loop_actions.router,
        inspector.router,
        webhooks.router,
        children.router,
    )
    for private in private_routers:
        app.include_router(
            private,
            dependencies=[Depends(auth.require_session), Depends(forms.clean_input)],
        )

    app.mount(
        PREFIX + "/static",
        StaticFiles(packages=[("agentd.admin", "static")]),
        name="admin-static",
    )
    _close_hub_on_shutdown(app)


def _close_hub_on_shutdown(app: FastAPI) -> None:
    previous = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Starlette) -> AsyncIterator[Any]:
        async with previous(a) as value:
            try:
                yield value
            finally:
                await a.state.admin_hub.close()

    app.router.lifespan_context = lifespan

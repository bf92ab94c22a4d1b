"""The control plane's whole ASGI app: the API (`agentd.api`) with the admin UI
(`agentd.admin`) mounted on it.

It sits above both, so neither imports the other's assembly: the admin imports the API
(its state, input rules, stream cursor), the API never imports the admin.
Called by: `agentd up`, `agentd api` and `agentd demo` (`process_app`), and tests
(`create_app`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

from agentd import admin
from agentd.api.app import create_api
from agentd.api.state import AppState
from agentd.settings import Settings

if TYPE_CHECKING:
    from agentd.db.pool import Pool
    from agentd.engine.service import Engine
    from agentd.registry import AgentRegistry


def create_app(state: AppState) -> FastAPI:
    """The API and, under /admin, the admin UI (its own cookie+CSRF auth)."""
    app = create_api(state)
    admin.mount(app, state)  # its own cookie+CSRF auth; enumerated by test_auth.py too
    return app


def process_app(
    settings: Settings,
    pool: Pool,
    url: str,
    registry: AgentRegistry,
    engine: Engine | None,
    token: str,
) -> FastAPI:
    """The app this process serves; `engine` None: `agentd api` (no worker here)."""
    state = AppState.create(
        settings=settings,
        pool=pool,
        registry=registry,
        database_url=url,
        api_token=token,
        engine=engine,
    )
    return create_app(state)

"""The FastAPI application factory."""

from __future__ import annotations

from fastapi import FastAPI

from agentd import __about__
from agentd.api import health
from agentd.api.state import AppState


def create_app(state: AppState) -> FastAPI:
    app = FastAPI(title="agentd", version=__about__.__version__,
                  description="Control plane of agentd: durable AI agent loops on PostgreSQL.")
    app.state.agentd = state
    app.include_router(health.router)
    return app

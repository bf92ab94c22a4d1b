"""The worker's probe port: /metrics, /healthz and /readyz for `agentd worker`.

A worker serves no API, but Prometheus must scrape its process metrics and Kubernetes
must probe it. This tiny app reuses the API's health and metrics routes (the same auth
rule: `AGENTD_METRICS_PUBLIC` or a token) without the fleet gauges the API exports; it is
served as the API is (`agentd.api.serve.HttpServer`).
"""

from __future__ import annotations

import secrets

from fastapi import FastAPI

from agentd.api import health, metrics, problems
from agentd.api.state import AppState
from agentd.engine.service import Engine


def create_app(engine: Engine) -> FastAPI:
    settings = engine.settings
    token = settings.api_token.get_secret_value() if settings.api_token else None
    state = AppState(
        settings=settings,
        pool=engine.pool,
        registry=engine.registry,
        lifecycle=engine.lifecycle,
        database_url=engine.url,
        # No operator token configured: nothing can match (read tokens still can).
        api_token=token or secrets.token_urlsafe(32),
        engine=engine,
        telemetry=engine.telemetry,
    )
    app = FastAPI(title="agentd worker", openapi_url=None, docs_url=None, redoc_url=None)
    app.state.agentd = state
    app.state.metrics = metrics.Metrics(state, fleet=False)
    problems.install(app)
    app.include_router(health.router)
    app.include_router(metrics.router)
    return app

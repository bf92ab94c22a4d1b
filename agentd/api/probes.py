"""The worker's probe port: /metrics, /healthz and /readyz for `agentd worker`.

A worker serves no API, but Prometheus must scrape its process metrics and Kubernetes
must probe it. This tiny app reuses the API's health and metrics routes (the same auth
rule: `AGENTD_METRICS_PUBLIC` or a token) without the fleet gauges the API exports.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Iterator
from typing import Any

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


class ProbeServer:
    """uvicorn in our event loop, without its signal handling; `port` is the bound port
    once `started` is set (pass 0 for an ephemeral one)."""

    def __init__(self, app: Any, *, host: str, port: int) -> None:
        import uvicorn

        ready = self.started = asyncio.Event()

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

            async def startup(self, sockets: Any = None) -> None:
                await super().startup(sockets)
                ready.set()

        config = uvicorn.Config(
            app, host=host, port=port, log_config=None, access_log=False, lifespan="off"
        )
        self.server = Server(config)

    @property
    def port(self) -> int:
        (server,) = self.server.servers
        return int(server.sockets[0].getsockname()[1])

    async def run(self, stop: asyncio.Event) -> None:
        task = asyncio.create_task(self.server.serve(), name="probe-server")
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        self.server.should_exit = True
        stopper.cancel()
        await task
        if not stop.is_set():
            from agentd.errors import AgentdError

            raise AgentdError("the metrics port stopped unexpectedly (is it in use?)")

"""/healthz (the process is alive) and /readyz (it can do its job)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from agentd.db import migrate
from agentd.db.pool import connection
from agentd.errors import DatabaseError
from agentd.store import workers

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: database, migrations, worker heartbeat, queues",
    responses={503: {"description": "Not ready; `checks` says why"}},
)
async def readyz(request: Request) -> JSONResponse:
    from agentd.engine.service import unconsumed_queues

    state = request.app.state.agentd
    checks: dict[str, Any] = {}
    ready = True
    try:
        async with asyncio.timeout(2.0):
            async with connection(state.pool) as conn:
                await workers.ping(conn)
                checks["database"] = "ok"
                try:
                    current = await migrate.is_current(conn)
                    checks["migrations"] = "current" if current else "pending"
                except migrate.MigrationChanged:
                    current = False
                    checks["migrations"] = "changed"
            ready = ready and current
            missing = await unconsumed_queues(state.pool)
            checks["unconsumed_queues"] = missing
    except (DatabaseError, TimeoutError) as exc:
        name = exc.driver if isinstance(exc, DatabaseError) else type(exc).__name__
        checks["database"] = f"unreachable: {name}"
        ready = False
    engine = state.engine
    if engine is not None:
        last = engine.renewer.last_ok
        limit = state.settings.heartbeat_interval * 3 + 1
        fresh = last is not None and time.monotonic() - last < limit
        checks["worker_heartbeat"] = "fresh" if fresh else "stale"
        ready = ready and fresh
    return JSONResponse(
        {"status": "ready" if ready else "not_ready", "checks": checks},
        status_code=200 if ready else 503,
    )

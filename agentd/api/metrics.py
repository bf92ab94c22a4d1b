"""GET /metrics: Prometheus exposition from a per-app CollectorRegistry (no globals).

Gauges are refreshed from the database at scrape time, so every API process reports the
fleet as the database sees it. Other modules may register more collectors on
`Metrics.registry` (app.state.metrics).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

from agentd.api import auth, problems
from agentd.db.pool import connection
from agentd.engine.service import unconsumed_queues
from agentd.settings import QUEUES
from agentd.store import jobs, loops, workers

router = APIRouter(tags=["health"])


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.loops = Gauge(
            "agentd_loops", "Loops by status and agent.", ["status", "agent"], registry=r
        )
        self.queue_depth = Gauge(
            "agentd_queue_depth", "Jobs waiting per queue.", ["queue"], registry=r
        )
        self.queue_oldest = Gauge(
            "agentd_queue_oldest_job_age_seconds",
            "Age of the oldest runnable job per queue.",
            ["queue"],
            registry=r,
        )
        self.workers_alive = Gauge(
            "agentd_workers_alive", "Registered workers not stopping.", registry=r
        )
        self.unconsumed = Gauge(
            "agentd_queue_unconsumed",
            "1 when no live worker consumes the queue.",
            ["queue"],
            registry=r,
        )
        self._lock = asyncio.Lock()

    async def refresh(self, pool: object) -> None:
        async with connection(pool) as conn:  # type: ignore[arg-type]
            by_status = await loops.count_by_status(conn)
            depth = await jobs.depth(conn)
            fleet = await workers.list_(conn)
        missing = set(await unconsumed_queues(pool))  # type: ignore[arg-type]
        self.loops.clear()
        for status, agent, n in by_status:
            self.loops.labels(status=status, agent=agent).set(n)
        for q in QUEUES:
            n, age = depth.get(q, (0, 0.0))
            self.queue_depth.labels(queue=q).set(n)
            self.queue_oldest.labels(queue=q).set(age)
            self.unconsumed.labels(queue=q).set(1 if q in missing else 0)
        self.workers_alive.set(sum(1 for w in fleet if not w.get("stopping")))

    async def exposition(self, pool: object) -> bytes:
        async with self._lock:  # concurrent scrapes must not interleave clear/set
            await self.refresh(pool)
            return generate_latest(self.registry)


async def _metrics_auth(request: Request) -> None:
    if request.app.state.agentd.settings.metrics_public:
        return
    creds = await auth._bearer(request)
    await auth.require_token(request, creds)


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    dependencies=[Depends(_metrics_auth)],
    responses={
        200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}},
        **problems.responses(401),
    },
)
async def metrics(request: Request) -> Response:
    body = await request.app.state.metrics.exposition(request.app.state.agentd.pool)
    return Response(body, media_type=CONTENT_TYPE_LATEST)

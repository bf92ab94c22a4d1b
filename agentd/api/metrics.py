"""GET /metrics: Prometheus exposition of the process's Telemetry registry (no globals).

Fleet gauges (loops, queues, workers) are refreshed from the database at scrape time, so
every API process reports the fleet as the database sees it; a worker's probe port
(`AGENTD_METRICS_PORT`) serves the same route without them (`fleet=False`), so summing
over targets never counts the fleet twice. Process metrics (turns, tokens, leases, pool)
are the ones the engine in this process recorded (agentd.observability.metrics).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

from agentd.api import auth, problems
from agentd.db.pool import Pool, connection
from agentd.engine.service import unconsumed_queues
from agentd.observability.metrics import Telemetry
from agentd.settings import QUEUES
from agentd.store import agent_versions, jobs, loop_reports, providers, workers

if TYPE_CHECKING:
    from agentd.api.state import AppState

router = APIRouter(tags=["health"])


class FleetGauges:
    """The fleet as the database sees it; registered once per Telemetry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
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
        self.providers_blocked = Gauge(
            "agentd_providers_blocked",
            "Provider keys inside a Retry-After back-off (every worker's turns wait).",
            registry=r,
        )
        self.provider_blocked_seconds = Gauge(
            "agentd_provider_blocked_seconds",
            "Seconds until a provider key's back-off ends (0: not blocked).",
            ["provider", "base_url", "model"],
            registry=r,
        )
        self.provider_in_flight = Gauge(
            "agentd_provider_in_flight",
            "Admitted model calls in flight per provider key (keys with limits).",
            ["provider", "base_url", "model"],
            registry=r,
        )

        self.waiting_for_version = Gauge(
            "agentd_loops_waiting_for_version",
            "Queued loops whose agent version no live worker can run.",
            ["agent", "version"],
            registry=r,
        )

    async def refresh(self, pool: Pool) -> None:
        async with connection(pool) as conn:
            by_status = await loop_reports.count_by_status(conn)
            waiting = await agent_versions.count_waiting(conn)
            depth = await jobs.depth(conn)
            fleet = await workers.list_(conn)
            keys = await providers.list_(conn, window_seconds=60.0)
        missing = set(await unconsumed_queues(pool))
        self.loops.clear()
        for status, agent, n in by_status:
            self.loops.labels(status=status, agent=agent).set(n)
        for q in QUEUES:
            n, age = depth.get(q, (0, 0.0))
            self.queue_depth.labels(queue=q).set(n)
            self.queue_oldest.labels(queue=q).set(age)
            self.unconsumed.labels(queue=q).set(1 if q in missing else 0)
        self.workers_alive.set(sum(1 for w in fleet if not w.get("stopping")))
        self.waiting_for_version.clear()
        for agent, version, n in waiting:
            self.waiting_for_version.labels(agent=agent, version=version).set(n)
        self.providers_blocked.set(sum(1 for k in keys if k["blocked_seconds"] > 0))
        self.provider_blocked_seconds.clear()
        self.provider_in_flight.clear()
        for k in keys:
            labels = {"provider": k["id"], "base_url": k["base_url"], "model": k["model"]}
            self.provider_blocked_seconds.labels(**labels).set(k["blocked_seconds"])
            self.provider_in_flight.labels(**labels).set(k["in_flight"])


class Metrics:
    """app.state.metrics: binds the app to its process's Telemetry (the engine's when this
    process runs one), which it stores on the AppState."""

    def __init__(self, state: AppState, *, fleet: bool = True) -> None:
        telemetry = state.telemetry or (state.engine.telemetry if state.engine else None)
        self.telemetry = telemetry or Telemetry()
        state.telemetry = self.telemetry
        self.telemetry.watch(pool=state.pool)
        if fleet and self.telemetry.fleet is None:
            self.telemetry.fleet = FleetGauges(self.telemetry.registry)
        self.fleet: FleetGauges | None = self.telemetry.fleet if fleet else None
        self.registry = self.telemetry.registry
        self._lock = asyncio.Lock()

    async def exposition(self, pool: object) -> bytes:
        async with self._lock:  # concurrent scrapes must not interleave clear/set
            if self.fleet is not None:
                await self.fleet.refresh(pool)
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

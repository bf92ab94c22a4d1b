"""GET /admin: loops by status, activity of the last hour, failures, cost by agent over
the last day, queues, workers, provider back-offs and limits, busy concurrency keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from agentd.admin import render
from agentd.db.pool import connection
from agentd.states import JobQueue, LoopStatus
from agentd.store import concurrency_keys, events, jobs, loop_reports, providers, workers

router = APIRouter(prefix="/admin")

#: Per-status counts stop here, so the dashboard never counts every loop on a page load.
COUNT_CAP = 10_000
WINDOW_MINUTES = 60
FAILURE_WINDOW = 24 * 3600.0
COST_WINDOW = 24 * 3600.0  # loops created in the last day (a range scan of loops_created)
STATUSES = [str(s) for s in LoopStatus]


def minute_buckets(rows: list[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """One bucket per minute of the window, oldest first, zeros where nothing happened."""
    by_minute = {r["minute"]: r for r in rows}
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=WINDOW_MINUTES - 1)
    out = []
    for i in range(WINDOW_MINUTES):
        minute = start + timedelta(minutes=i)
        row = by_minute.get(minute, {})
        out.append(
            {
                "minute": minute,
                "turns": int(row.get("turns", 0)),
                "tool_calls": int(row.get("tool_calls", 0)),
                "failures": int(row.get("failures", 0)),
            }
        )
    return out


def chart(buckets: list[dict[str, Any]], key: str) -> dict[str, Any]:
    peak = max((b[key] for b in buckets), default=0)
    return {
        "total": sum(b[key] for b in buckets),
        "peak": peak,
        "last": buckets[-1][key] if buckets else 0,
        "bars": [
            {"h": (b[key] / peak * 100) if peak else 0, "n": b[key], "at": b["minute"]}
            for b in buckets
        ],
    }


@router.get("", include_in_schema=False)
@router.get("/", include_in_schema=False)
async def dashboard(request: Request) -> Response:
    state = request.app.state.agentd
    now = datetime.now(UTC)
    async with connection(state.pool) as conn:
        counts = await loop_reports.count_by_status_capped(conn, statuses=STATUSES, cap=COUNT_CAP)
        estimate = await loop_reports.estimate_total(conn)
        activity = await events.activity_per_minute(conn, window=WINDOW_MINUTES * 60.0)
        failures = await events.failure_reasons(conn, window=FAILURE_WINDOW)
        depth = await jobs.depth(conn)
        fleet = await workers.list_(conn)
        maintenance = await workers.list_maintenance(conn)
        provider_keys = await providers.list_(
            conn, window_seconds=state.settings.provider_rate_window
        )
        busy_keys = await concurrency_keys.list_(conn, limit=20)
        cost = await loop_reports.cost_by_agent(
            conn, since=now - timedelta(seconds=COST_WINDOW), until=now, agent=None
        )
    buckets = minute_buckets(activity, now)
    queues = [
        {"queue": q, "depth": depth.get(q, (0, 0.0))[0], "lag": depth.get(q, (0, 0.0))[1]}
        for q in JobQueue
    ]
    return render.render(
        request,
        "dashboard.html",
        {
            "nav": "dashboard",
            "counts": [(s, counts.get(s, 0)) for s in STATUSES],
            "cap": COUNT_CAP,
            "estimate": estimate,
            "turns": chart(buckets, "turns"),
            "tool_calls": chart(buckets, "tool_calls"),
            "failures_chart": chart(buckets, "failures"),
            "failures": failures,
            "cost": cost,
            "queues": queues,
            "workers": fleet,
            "maintenance": maintenance,
            "providers": provider_keys,
            "concurrency_keys": busy_keys,
            "now": now,
        },
    )

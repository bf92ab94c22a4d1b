"""Helpers for the provider-limit and concurrency-key tests: racing engines, and what the
fake provider saw (arrival and end of every request, by loop)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any

from agentd.db.pool import Pool, connection
from agentd.engine.service import Engine
from agentd.registry import AgentRegistry
from agentd.store import loops
from agentd.store.models import Loop
from agentd.testing.engine import fast_settings, running_engine
from agentd.testing.fake_llm import RecordedRequest


@contextlib.asynccontextmanager
async def two_engines(
    pool: Pool, other: Pool, url: str, registry: AgentRegistry, **settings: Any
) -> AsyncIterator[tuple[Engine, Engine]]:
    """Two engines racing for the same queues, each with its own pool and worker id.

    Both run in the test's process, so a scheduler stall of a loaded box stalls both
    heartbeats at once; with fast_settings' 2 s stale limit a 4 s stall (seen in a loaded
    run) made each engine's reaper declare the other dead and re-run its turn, one model
    request more than these tests count. They test limits, not recovery: 10 s of margin.
    """
    s = fast_settings(**{"lease_margin": 10.0, **settings})
    async with (
        running_engine(pool, url, registry, settings=s) as one,
        running_engine(other, url, registry, settings=s) as two,
    ):
        yield one, two


async def rows(pool: Pool, ids: Iterable[uuid.UUID]) -> list[Loop]:
    async with connection(pool) as conn:
        out = [await loops.get(conn, loop_id=i) for i in ids]
    return [r for r in out if r is not None]


async def all_completed(pool: Pool, ids: list[uuid.UUID]) -> list[Loop] | None:
    got = await rows(pool, ids)
    assert not [r for r in got if r.status in ("failed", "paused", "stopped")], got
    return got if all(r.status == "completed" for r in got) else None


def first_user_text(req: RecordedRequest) -> str:
    for m in req.json.get("messages", []):
        if m.get("role") == "user":
            return str(m.get("content"))
    return ""


def peak_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end before a start at the same time)."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    peak = now = 0
    for _, d in edges:
        now += d
        peak = max(peak, now)
    return peak


def most_in_window(times: list[float], window: float, weights: list[int] | None = None) -> int:
    """The largest total weight of the events in any half-open window [t, t + window)."""
    w = weights or [1] * len(times)
    pairs = sorted(zip(times, w, strict=True))
    best = 0
    for i, (t, _) in enumerate(pairs):
        best = max(best, sum(x for s, x in pairs[i:] if s < t + window))
    return best

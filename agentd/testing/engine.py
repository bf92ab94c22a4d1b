"""Run an Engine inside a test's event loop, with durations small enough for tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from agentd.db.pool import Pool, connection
from agentd.engine.service import Engine
from agentd.pipeline.stacks import Stacks
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.store import loops
from agentd.store.models import Loop

T = TypeVar("T")

FAST = dict(
    heartbeat_interval=0.2,
    lease_margin=2.0,
    liveness_interval=0.2,
    reaper_interval=0.5,
    poll_interval=0.2,
    shutdown_grace=1.0,
    default_read_timeout=5.0,
    default_tool_timeout=5.0,
    llm_retry_base_delay=0.05,
    llm_retry_max_delay=0.5,
    stream_flush_interval=0.05,
    queued_reap_threshold=30.0,
    log_level="warning",
)


def fast_settings(**overrides: Any) -> Settings:
    return Settings(**{**FAST, **overrides})


@contextlib.asynccontextmanager
async def running_engine(
    pool: Pool,
    url: str,
    registry: AgentRegistry,
    *,
    settings: Settings | None = None,
    queues: list[str] | None = None,
    **kw: Any,
) -> AsyncIterator[Engine]:
    settings = settings or fast_settings()
    engine = Engine(
        settings=settings,
        pool=pool,
        registry=registry,
        url=url,
        queues=queues or list(settings.queues),
        **{"stacks": Stacks(), **kw},
    )
    stop = asyncio.Event()
    task = asyncio.create_task(engine.run(stop), name="test-engine")
    started = asyncio.ensure_future(engine.started.wait())
    await asyncio.wait({task, started}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    started.cancel()
    if task.done():
        task.result()  # raise the startup error
    try:
        yield engine
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)


async def eventually(
    check: Callable[[], Awaitable[T]], *, within: float = 10.0, interval: float = 0.05
) -> T:
    """Poll `check` until it returns something truthy; fail after `within` seconds."""
    deadline = time.monotonic() + within
    last: T | None = None
    while True:
        last = await check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s (last: {last!r})")
        await asyncio.sleep(interval)


async def loop_row(pool: Pool, loop_id: uuid.UUID) -> Loop:
    """The loop's row as it is now (it must exist)."""
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop_id)
    assert row is not None
    return row


async def hold_claims(engine: Engine, queue: str) -> None:
    """Keep `engine`'s worker from claiming `queue` jobs until the test sets the queue's
    limit again and wakes it. A claim already in flight would not see a lowered limit, so
    first wait until the claim loop found the queue empty and is parked."""
    worker = engine.worker

    async def parked() -> bool:
        return worker.drained[queue]

    await eventually(parked)
    worker.limits[queue] = 0

"""Fixed-rate ticks with jitter that stop when `stop` is set."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator


async def ticks(
    interval: float, stop: asyncio.Event, *, jitter: float = 0.1, immediate: bool = True
) -> AsyncIterator[int]:
    n = 0
    if immediate and not stop.is_set():
        yield n
    loop = asyncio.get_running_loop()
    next_at = loop.time()
    while not stop.is_set():
        next_at += interval
        delay = max(0.0, next_at - loop.time()) + random.uniform(0, interval * jitter)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)
        if stop.is_set():
            return
        n += 1
        yield n


class Signal:
    """A countable event tests can wait on instead of sleeping."""

    def __init__(self) -> None:
        self.count = 0
        self._cond = asyncio.Condition()
        self._tasks: set[asyncio.Task[None]] = set()

    def fire(self) -> None:
        self.count += 1
        task = asyncio.get_running_loop().create_task(self._notify())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _notify(self) -> None:
        async with self._cond:
            self._cond.notify_all()

    async def wait_for(self, n: int, within: float = 5.0) -> None:
        async with asyncio.timeout(within), self._cond:
            await self._cond.wait_for(lambda: self.count >= n)

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
    """A countable event tests can wait on instead of sleeping.

    `fire` runs once per job in the worker: it only counts unless someone waits, and then
    wakes the waiters whose count is reached (no task, no lock per fire)."""

    def __init__(self) -> None:
        self.count = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def fire(self) -> None:
        self.count += 1
        if not self._waiters:
            return
        waiting = []
        for n, fut in self._waiters:
            if self.count < n:
                waiting.append((n, fut))
            elif not fut.done():
                fut.set_result(None)
        self._waiters = waiting

    async def wait_for(self, n: int, within: float = 5.0) -> None:
        if self.count >= n:
            return
        entry = (n, asyncio.get_running_loop().create_future())
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(within):
                await entry[1]
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)

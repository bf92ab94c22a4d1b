"""The horizon of GET /v1/events, polled once a second per process for every SSE client.

An SSE client of the fleet feed that has caught up used to poll the database itself once
a second: 600 idle clients were 600 queries a second on the pool the worker and the rest
of the API share. Now one task polls the feed's horizon (the highest id it may serve) while
any client is connected, and a caught-up client waits for the horizon to pass its cursor:
an idle client costs nothing, and a client reads only when there is something past it
(under the stream hub's read slots, so streams never hold the whole pool).
"""

from __future__ import annotations

import asyncio
import contextlib

from agentd import logs
from agentd.db.pool import Pool, connection
from agentd.store import events

log = logs.get("agentd.api.events_tail")


class FeedTail:
    def __init__(self, pool: Pool, *, interval: float, settle: float) -> None:
        self.pool = pool
        self.interval = interval
        self.settle = settle
        self.horizon = -1  # not read yet
        self._moved = asyncio.Event()
        self._clients = 0
        self._task: asyncio.Task[None] | None = None

    def join(self) -> None:
        """A client connected: poll while there is one."""
        self._clients += 1
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="events-tail")

    async def leave(self) -> None:
        self._clients -= 1
        if self._clients == 0 and self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            self.horizon = -1

    async def wait_past(self, cursor: int, within: float) -> bool:
        """True once the horizon is past `cursor`; False after `within` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while self.horizon <= cursor:
            moved = self._moved
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                async with asyncio.timeout(left):
                    await moved.wait()
            except TimeoutError:
                return False
        return True

    async def _run(self) -> None:
        while True:
            try:
                async with connection(self.pool) as conn:
                    horizon = await events.feed_horizon(conn, settle=self.settle)
            except Exception as exc:  # an outage: the clients wait, the poll goes on
                log.warning("events_tail.poll_failed", error=type(exc).__name__)
            else:
                if horizon != self.horizon:
                    self.horizon = horizon
                    moved, self._moved = self._moved, asyncio.Event()
                    moved.set()
            await asyncio.sleep(self.interval)

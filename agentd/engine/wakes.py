"""This process's wake-ups for its worker's claim loops, one per queue the worker claims.

A wake is set by a commit here that enqueued work on a queue this process consumes
(engine/dispatch.py: the successor is claimed at once, without a NOTIFY, which would
serialize commits), by the listener's NOTIFY and its reconnects, and by a freed slot.
It exists before the worker, so the Runtime the worker runs on is built complete.
Called by: engine.dispatch (through Runtime.wake_local), engine.worker, engine.service.
"""

from __future__ import annotations

import asyncio

from agentd.states import JobQueue

CLAIMED_QUEUES = (JobQueue.LLM, JobQueue.TOOL)


class Wakes:
    def __init__(self) -> None:
        # Keyed by JobQueue members; a plain "llm" looks them up too (a StrEnum).
        self.events: dict[str, asyncio.Event] = {q: asyncio.Event() for q in CLAIMED_QUEUES}
        # The queue's last claim found nothing and no wake came since: a freed slot then
        # has nothing to claim, so it does not poll (new work arrives with a wake).
        self.drained: dict[str, bool] = {q: False for q in CLAIMED_QUEUES}

    def wake(self, queue: str) -> None:
        ev = self.events.get(queue)
        if ev is not None:
            self.drained[queue] = False
            ev.set()

    def wake_all(self) -> None:
        for q in self.events:
            self.wake(q)

"""OwedReleases: turns and tool calls this process gave up while the database was away,
owed back to the queue.

The LeaseRenewer records a debt when a turn or tool call is cancelled for want of the
database (`owe`) and pays it on its heartbeat connection as soon as the database answers
(`send`): one transaction that releases every owed lease, fenced by its token, so work that
moved on meanwhile is left alone.
Called by: engine.lease_renewer.
"""

from __future__ import annotations

import asyncio
import uuid

from agentd import logs
from agentd.db import pool as dbpool
from agentd.engine.ticks import Signal
from agentd.states import JobQueue, TransitionReason
from agentd.store import jobs, loops, tool_calls

log = logs.get("agentd.lease_renewer")


class OwedReleases:
    def __init__(self) -> None:
        self._turns: dict[uuid.UUID, uuid.UUID] = {}
        self._tools: dict[int, uuid.UUID] = {}
        self.wake = asyncio.Event()  # set when something is owed
        self.released = Signal()
        self.released_count = 0

    def owe(self, key: uuid.UUID | tuple[str, int], token: uuid.UUID) -> None:
        if isinstance(key, uuid.UUID):
            self._turns[key] = token
        else:
            self._tools[key[1]] = token
        self.wake.set()

    def owed(self) -> tuple[dict[uuid.UUID, uuid.UUID], dict[int, uuid.UUID]]:
        return dict(self._turns), dict(self._tools)

    def empty(self) -> bool:
        return not self._turns and not self._tools

    async def send(self, conn: dbpool.Connection) -> int:
        """Release everything owed in one transaction on `conn` (raises if the database is
        away: the debt stays). Returns how many were sent back."""
        turns, tools = self.owed()
        if not turns and not tools:
            return 0
        async with conn.transaction():
            if turns:
                await loops.release_leases(
                    conn,
                    ids=list(turns),
                    tokens=list(turns.values()),
                    reason=TransitionReason.RELEASED_AFTER_OUTAGE,
                )
                await jobs.notify(conn, queue=JobQueue.LLM)
            if tools:
                await tool_calls.release_leases(conn, ids=list(tools), tokens=list(tools.values()))
                await jobs.notify(conn, queue=JobQueue.TOOL)
        # Forget what was sent back, unless it was owed again (another token) meanwhile.
        for loop_id, token in turns.items():
            if self._turns.get(loop_id) == token:
                del self._turns[loop_id]
        for tid, token in tools.items():
            if self._tools.get(tid) == token:
                del self._tools[tid]
        n = len(turns) + len(tools)
        self.released_count += n
        log.info("lease_renewer.released_owed", turns=len(turns), tool_calls=len(tools))
        self.released.fire()
        return n

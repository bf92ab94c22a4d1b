"""Janitor: retention of wire logs (on by default), events and inbound MCP sessions
(opt-in), and the expiry of loop idempotency keys, in batches.

Guarantee: deletes in batches of `janitor_batch_size` (no long lock); inbound sessions go
by creation age and take their events with them even when event retention is unset; wire
logs (`llm.request`, `mcp.*` events) go after `wire_log_retention` (30 days by default),
then the stored request parts of loops whose newest part is that old — messages and every
other event stay (docs/long-loops.md); idempotency keys go once past
`idempotency_key_retention` (they answer for nothing then); finished webhook deliveries
after `webhook_delivery_retention` (7 days by default; pending ones never).
Tolerates: several janitors at once (deletes are idempotent).
Never: deletes events or sessions when every retention is unset; a message.
Called by: engine.service (every `janitor_interval`), `agentd prune`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from agentd import logs
from agentd.db.pool import Pool, transaction
from agentd.engine.ticks import Signal, ticks
from agentd.errors import DatabaseError
from agentd.settings import Settings
from agentd.store import events, idempotency_keys, mcp, webhooks, workers

log = logs.get("agentd.janitor")


@dataclass
class PruneReport:
    events: int = 0
    inbound_sessions: int = 0
    wire_logs: int = 0
    wire_parts: int = 0
    idempotency_keys: int = 0
    webhook_deliveries: int = 0

    def as_log(self) -> dict[str, int]:
        return asdict(self)


class Janitor:
    def __init__(self, settings: Settings, pool: Pool) -> None:
        self.settings = settings
        self.pool = pool
        self.pruned = Signal()

    async def prune_once(self) -> PruneReport:
        s = self.settings
        report = PruneReport()
        now = datetime.now(UTC)
        if s.mcp_inbound_session_retention is not None:
            cutoff = now - s.mcp_inbound_session_retention
            report.inbound_sessions += await self._batches(mcp.prune_inbound, cutoff)
        if s.wire_log_retention is not None:
            cutoff = now - s.wire_log_retention
            report.wire_logs += await self._batches(events.prune_wire, cutoff)
            report.wire_parts += await self._batches(events.prune_wire_parts, cutoff)
        if s.event_retention is not None:
            cutoff = now - s.event_retention
            report.events += await self._batches(events.prune, cutoff)
        cutoff = now - s.idempotency_key_retention
        report.idempotency_keys += await self._batches(idempotency_keys.prune, cutoff)
        if s.webhook_delivery_retention is not None:
            cutoff = now - s.webhook_delivery_retention
            report.webhook_deliveries += await self._batches(webhooks.prune, cutoff)
        async with transaction(self.pool) as conn:
            await workers.record_maintenance(conn, name="janitor", report=report.as_log())
        return report

    async def _batches(self, prune: Callable[..., Awaitable[int]], cutoff: datetime) -> int:
        batch = self.settings.janitor_batch_size
        total = 0
        while True:
            async with transaction(self.pool) as conn:
                n = await prune(conn, cutoff=cutoff, batch=batch)
            total += n
            if n < batch:
                return total

    async def run(self, stop: asyncio.Event) -> None:
        async for _ in ticks(self.settings.janitor_interval, stop, jitter=0.1):
            try:
                report = await self.prune_once()
            except DatabaseError as exc:
                log.warning("janitor.failed", error=str(exc))
                continue
            if any(report.as_log().values()):
                log.info("janitor.pruned", **report.as_log())
            self.pruned.fire()

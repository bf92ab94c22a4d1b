"""McpSessionEnder: ends the HTTP MCP sessions of finished loops with `DELETE`, fleet-wide.

An MCP client SHOULD send `DELETE` with its `Mcp-Session-Id` once it no longer needs the
session (Streamable HTTP, 2025-06-18 / 2025-11-25). agentd keeps one session per loop and
server (`mcp_sessions`); once a loop has been completed, failed or stopped for
`mcp_session_end_grace`, this sweep ends them.
Guarantee: each batch's ids are forgotten in one committed statement (rows claimed with SKIP
LOCKED) BEFORE any DELETE is sent, so a session is ended at most once and by one worker, no
pooled connection is held across the network, and a crash between the commit and the
DELETE only leaves that server to expire the session itself. A loop continued later finds
no id and opens a new session on its next tool call (McpClient.call_tool).
Tolerates: any number of enders at once; a server that is down, answers 5xx, 404 or 405
(logged, never retried); an agent or server entry removed since (its sessions are only
forgotten); a server that answers stateless (its made-up ids are never claimed).
Never: ends a stdio or in-process session (they end with their process); fails a loop.
Called by: engine.service (every `reaper_interval`, on maintenance workers).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from agentd import logs, redact
from agentd.agent import LoopView, agent_mcp_configs
from agentd.db.pool import Pool, transaction
from agentd.engine.ticks import Signal, ticks
from agentd.errors import DatabaseError
from agentd.mcp.client import McpClient
from agentd.mcp.hub import McpHub
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.store import mcp

if TYPE_CHECKING:
    import httpx

log = logs.get("agentd.mcp_sessions")

BATCH = 200
PARALLEL = 16  # DELETEs in flight at once; each is bounded by its server's timeout
RESOLVE_TIMEOUT = 30.0  # seconds for one loop's agent to name its servers


@dataclass
class EndReport:
    claimed: int = 0  # ids forgotten
    ended: int = 0  # the server answered 2xx to the DELETE
    not_ended: int = 0  # 404/405, down, 5xx, or no longer configured: left to expire

    def as_log(self) -> dict[str, int]:
        return asdict(self)


class McpSessionEnder:
    def __init__(
        self,
        settings: Settings,
        pool: Pool,
        registry: AgentRegistry,
        *,
        http: httpx.AsyncClient | None = None,
        hub: McpHub | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.registry = registry
        # The runtime's: its pooled client, and the version each server chose (the header).
        self.hub = hub if hub is not None else McpHub(http=http)
        self.swept = Signal()

    async def end_once(self) -> EndReport:
        report = EndReport()
        grace = self.settings.mcp_session_end_grace
        while True:
            async with transaction(self.pool) as conn:
                rows = await mcp.claim_sessions_to_end(conn, grace=grace, batch=BATCH)
            # Committed: from here on the ids are ours alone, and no connection is held.
            report.claimed += len(rows)
            ended = await self._end(rows)
            report.ended += ended
            report.not_ended += len(rows) - ended
            if len(rows) < BATCH:
                return report

    async def _end(self, rows: list[dict[str, Any]]) -> int:
        by_loop: dict[UUID, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            by_loop[row["loop_id"]].append(row)
        gate = asyncio.Semaphore(PARALLEL)
        counts = await asyncio.gather(*(self._end_loop(r, gate) for r in by_loop.values()))
        return sum(counts)

    async def _end_loop(self, rows: list[dict[str, Any]], gate: asyncio.Semaphore) -> int:
        first = rows[0]
        try:
            view = LoopView(
                id=first["loop_id"],
                subject=first["subject"],
                state=first["state"] or {},
                step_count=first["step_count"],
            )
            agent = self.registry.instantiate(first["agent"], view)
            async with asyncio.timeout(RESOLVE_TIMEOUT):  # an agent's mcp_servers() may await
                configs = {c.name: c for c in await agent_mcp_configs(agent)}
        except Exception as exc:  # an agent removed or broken since: nothing to end with
            log.warning(
                "mcp.session_end_skipped",
                loop_id=str(first["loop_id"]),
                agent=first["agent"],
                error=redact.text(str(exc) or type(exc).__name__),
            )
            return 0

        async def end(row: dict[str, Any]) -> bool:
            config = configs.get(row["mcp_name"])
            if config is None or config.url is None:
                return False  # removed from the agent, or no longer over HTTP
            where = {"loop_id": str(row["loop_id"]), "server": row["mcp_name"]}
            async with gate:
                try:
                    # Best effort: an McpError (down, timed out) is logged by terminate().
                    ended = await McpClient(config, hub=self.hub).terminate(row["ended_session_id"])
                except Exception as exc:
                    log.warning(
                        "mcp.session_end_failed",
                        **where,
                        error=redact.text(str(exc) or type(exc).__name__),
                    )
                    return False
            if not ended:  # 404/405 (fine), 5xx or unreachable: the server expires it
                log.info("mcp.session_end_unconfirmed", **where)
            return ended

        return sum(await asyncio.gather(*(end(r) for r in rows)))

    async def run(self, stop: asyncio.Event) -> None:
        async for _ in ticks(self.settings.reaper_interval, stop, jitter=0.1):
            try:
                report = await self.end_once()
            except DatabaseError as exc:
                log.warning("mcp.session_end_sweep_failed", error=str(exc))
                continue
            if report.claimed:
                log.info("mcp.sessions_ended", **report.as_log())
            self.swept.fire()

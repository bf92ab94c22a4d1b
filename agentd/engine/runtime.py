"""What a running engine shares with its pipelines: settings, pool, registry, clients."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentd.db.pool import Pool
from agentd.engine.finish_batch import FinishBatch
from agentd.mcp.hub import McpHub
from agentd.observability.metrics import Telemetry
from agentd.registry import AgentRegistry
from agentd.settings import Settings

if TYPE_CHECKING:
    from agentd.engine.lease_renewer import LeaseRenewer
    from agentd.engine.stream_flusher import StreamFlusher
    from agentd.llm.client import LLMClient


@dataclass
class Runtime:
    settings: Settings
    pool: Pool
    registry: AgentRegistry
    llm: LLMClient
    worker_id: uuid.UUID = field(default_factory=uuid.uuid4)
    hostname: str = field(default_factory=socket.gethostname)
    consumes: frozenset[str] = frozenset()
    renewer: LeaseRenewer | None = None
    flusher: StreamFlusher | None = None
    # What the process knows of its MCP servers and shares among loops: one pooled HTTP
    # client, each server's facts, shared sessions and tool listings (mcp/hub.py).
    mcp: McpHub = field(default_factory=McpHub)
    # Called after a commit that enqueued work on a queue this process consumes, so the
    # successor is claimed at once without a NOTIFY (which would serialize commits).
    wake_local: Callable[[str], None] = field(default=lambda queue: None)
    # Metrics shared with this process's /metrics (the API's, or the worker's probe port).
    telemetry: Telemetry = field(default_factory=Telemetry)
    extras: dict[str, Any] = field(default_factory=dict)
    _finishes: FinishBatch | None = field(default=None, init=False, repr=False)

    @property
    def finishes(self) -> FinishBatch:
        """The process's group commit for the ends of tool calls (engine/finish_batch.py)."""
        if self._finishes is None:
            self._finishes = FinishBatch(self.pool)
        return self._finishes

    def tool_lease_seconds(self, mcp_timeouts: list[float] | None = None) -> float:
        """A tool lease: the slowest configured MCP timeout or the tool ceiling, plus margin."""
        s = self.settings
        base = max([s.default_tool_timeout, *(mcp_timeouts or [])])
        return base + s.lease_margin

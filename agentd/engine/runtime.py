"""What a running engine shares with its pipelines: settings, pool, registry, clients, and
the process's state (known secrets, wire-log hints, background hand-backs), owned here.

Built complete by whoever assembles the process (engine/service.py) and frozen: no part
of it is set after construction.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentd import redact
from agentd.db.pool import Pool
from agentd.engine.finish_batch import FinishBatch
from agentd.engine.wakes import Wakes
from agentd.engine.wire_hints import WireHints
from agentd.mcp.hub import McpHub
from agentd.observability.metrics import Telemetry
from agentd.registry import AgentRegistry
from agentd.settings import Settings

if TYPE_CHECKING:
    from agentd.engine.lease_renewer import LeaseRenewer
    from agentd.engine.stream_flusher import StreamFlusher
    from agentd.llm.client import LLMClient


@dataclass(frozen=True, eq=False)
class Runtime:
    settings: Settings
    pool: Pool
    registry: AgentRegistry
    llm: LLMClient
    worker_id: uuid.UUID = field(default_factory=uuid.uuid4)
    hostname: str = field(default_factory=socket.gethostname)
    consumes: frozenset[str] = frozenset()
    # The process's one heartbeat and its stream flusher; None where no engine runs them
    # (tests that drive a pipeline directly).
    renewer: LeaseRenewer | None = None
    flusher: StreamFlusher | None = None
    # What the process knows of its MCP servers and shares among loops: one pooled HTTP
    # client, each server's facts, shared sessions and tool listings (mcp/hub.py).
    mcp: McpHub = field(default_factory=McpHub)
    # The worker's claim loops wait on these (engine/wakes.py).
    wakes: Wakes = field(default_factory=Wakes)
    # Metrics shared with this process's /metrics (the API's, or the worker's probe port).
    telemetry: Telemetry = field(default_factory=Telemetry)
    # The secrets this process masks (its owner installs them for the tasks it runs).
    secrets: redact.KnownSecrets = field(default_factory=redact.current)
    # What the wire log knows is stored already, per loop (pipeline/wire.py).
    wire_hints: WireHints = field(default_factory=WireHints)
    # Background statements handing leases back (engine/dispatch.py): held until done.
    handing_back: set[asyncio.Task[None]] = field(default_factory=set)
    # The process's group commit for the ends of tool calls (engine/finish_batch.py).
    finishes: FinishBatch = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Derived from the pool, at construction (frozen: hence object.__setattr__).
        object.__setattr__(self, "finishes", FinishBatch(self.pool))

    def wake_local(self, queue: str) -> None:
        """After a commit that enqueued work on `queue`, which this process consumes: the
        worker claims the successor at once, without a NOTIFY (which serializes commits)."""
        self.wakes.wake(queue)

    def tool_lease_seconds(self, mcp_timeouts: list[float] | None = None) -> float:
        """A tool lease: the slowest configured MCP timeout or the tool ceiling, plus margin."""
        s = self.settings
        base = max([s.default_tool_timeout, *(mcp_timeouts or [])])
        return base + s.lease_margin

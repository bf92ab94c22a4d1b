"""What a running engine shares with its pipelines: settings, pool, registry, clients."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agentd.db.pool import Pool
from agentd.observability.metrics import Telemetry
from agentd.registry import AgentRegistry
from agentd.settings import Settings

if TYPE_CHECKING:
    from agentd.engine.lease_renewer import LeaseRenewer
    from agentd.engine.stacks import Stacks
    from agentd.engine.stream_flusher import StreamFlusher
    from agentd.llm.client import LLMClient
    from agentd.store.jobs import ToolClaim, TurnPrefetch
    from agentd.store.models import Loop


class Handoff(Protocol):
    """The worker, as the finalizers see it: slots to run what they hand to it (a turn's own
    tool calls; the turn a tool call's result makes due)."""

    def reserve(self, queue: str, n: int) -> int:
        """Take up to `n` free slots of `queue` now; returns how many were taken."""
        ...

    def unreserve(self, queue: str, n: int) -> None: ...

    def run_leased_tool(self, claim: ToolClaim, lease_token: uuid.UUID) -> None:
        """Run a call already leased to this worker, in a slot taken by reserve()."""
        ...

    def run_leased_turn(self, loop: Loop, prefetch: TurnPrefetch | None) -> None:
        """Run a turn already claimed for this worker, in a slot taken by reserve()."""
        ...

    def chain_after(self, loop_id: uuid.UUID, generation: uuid.UUID) -> int | None:
        """The last message id of the loop's transcript this worker holds for `generation`
        (a chained turn then reads only newer rows), or None."""
        ...


@dataclass
class Runtime:
    settings: Settings
    pool: Pool
    registry: AgentRegistry
    llm: LLMClient
    stacks: Stacks
    worker_id: uuid.UUID = field(default_factory=uuid.uuid4)
    hostname: str = field(default_factory=socket.gethostname)
    consumes: frozenset[str] = frozenset()
    renewer: LeaseRenewer | None = None
    flusher: StreamFlusher | None = None
    # One HTTP client for every MCP server call of this process (pooled connections).
    mcp_http: Any = None
    # Called after a commit that enqueued work on a queue this process consumes, so the
    # successor is claimed at once without a NOTIFY (which would serialize commits).
    wake_local: Callable[[str], None] = field(default=lambda queue: None)
    # Set when this process's worker chains: a finished turn's tool calls run here at once.
    handoff: Handoff | None = None
    # Metrics shared with this process's /metrics (the API's, or the worker's probe port).
    telemetry: Telemetry = field(default_factory=Telemetry)
    extras: dict[str, Any] = field(default_factory=dict)

    def tool_lease_seconds(self, mcp_timeouts: list[float] | None = None) -> float:
        """A tool lease: the slowest configured MCP timeout or the tool ceiling, plus margin."""
        s = self.settings
        base = max([s.default_tool_timeout, *(mcp_timeouts or [])])
        return base + s.lease_margin

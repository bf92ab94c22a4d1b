"""What the lifecycle's transition modules (cascade, decisions, forks, freezing, sending,
starting) use of the Lifecycle that calls them: its handles and the steps every transition
shares. engine/lifecycle.py's Lifecycle is the one implementation; naming the interface here
keeps those modules from importing the class that imports them."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agentd.db.pool import Connection, Pool
    from agentd.registry import AgentRegistry
    from agentd.settings import Settings
    from agentd.store.models import Loop, ToolCall


class LoopOps(Protocol):
    pool: Pool
    registry: AgentRegistry
    settings: Settings

    def lease_for(self, agent: str) -> float:
        """A turn's lease for `agent`'s loops (its read timeout, or the default)."""
        ...

    async def locked(self, conn: Connection, loop_id: uuid.UUID) -> Loop:
        """The loop, locked (LoopNotFound when there is none)."""
        ...

    async def record(
        self, conn: Connection, loop: Loop, name: str, reason: str, log: str | None = None
    ) -> None:
        """One lifecycle event of `loop`."""
        ...

    async def runnable(
        self, conn: Connection, loop: Loop, unresolved: list[ToolCall]
    ) -> list[ToolCall]:
        """Of `unresolved`, the calls that may run now."""
        ...

    async def redispatch(self, conn: Connection, loop: Loop, reason: str) -> Loop:
        """Make the loop runnable again from where it stopped, with a new generation."""
        ...

    async def cancel_in_flight(
        self, conn: Connection, loop: Loop, action: str, *, only_generation: bool = False
    ) -> None:
        """Drop the loop's jobs and shells and tell workers to cancel its work."""
        ...

    async def pause_in(self, conn: Connection, loop: Loop, reason: str) -> Loop:
        """Pause a loop the caller locked, then its children."""
        ...

    async def stop_in(self, conn: Connection, loop: Loop, reason: str) -> Loop:
        """Stop a loop the caller locked, then its children."""
        ...

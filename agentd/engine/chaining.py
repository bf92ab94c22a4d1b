"""Chaining: the successor work a finalizer leases to its own worker, and the slots for it.

A worker that chains (`chaining = true`) puts a `Chain` on each job's context: free slots
of the successor's queue (the tool queue after an LLM turn, the LLM queue after a tool
call), taken only when the finalizer asks. A finalizer that chains does three things and no
bookkeeping: `take(n)` slots before its write; name in `tokens` the leases its write may
take for this worker (so they can be handed back if the write's outcome is unknown); and,
once the write returned, set `leased` to what it leased (`LeasedWork()`: nothing). The
worker settles after the stack returns (engine/worker.py): it runs what was leased in the
slots taken, gives the other slots back, and hands back to the queue whatever a write that
raised or was cancelled may have committed.
Guarantee: every slot taken is either used by leased work or given back, once.
Tolerates: a finalizer that never touches the chain (a custom one): nothing is taken, the
successor jobs its write enqueued are claimed as usual.
Never: imports the worker; holds a connection.
Called by: engine.worker (offers, settles), the canonical finalizers (ResponseParsing,
ResponseCreation).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentd.store.jobs import ToolClaim, TurnPrefetch
    from agentd.store.models import Loop


@dataclass(frozen=True)
class LeasedWork:
    """What a finalizer's write leased to this worker, for the worker to run."""

    tools: tuple[ToolClaim, ...] = ()  # a turn's calls, each leased with its lease_token
    turn: Loop | None = None  # the loop's next turn, claimed on its new execution token
    prefetch: TurnPrefetch | None = None  # what that turn reads

    @property
    def slots(self) -> int:
        return len(self.tools) + (1 if self.turn is not None else 0)


def _no_history() -> int | None:
    return None


def _no_tools() -> bool:
    return False


@dataclass
class Chain:
    """This worker's offer to one job's finalizer (see the module docstring)."""

    queue: str  # the successor's queue
    reserve: Callable[[int], int]  # the worker's: takes up to n free slots, returns how many
    # The last message id of the loop's transcript the worker holds for this job's
    # generation (a chained turn then reads only newer rows), or None.
    history_after: Callable[[], int | None] = _no_history
    # Whether the worker holds the loop's MCP tools for a chained turn (shared sessions only),
    # so the chained read can leave them out.
    tools_held: Callable[[], bool] = _no_tools
    taken: int = 0
    tokens: list[uuid.UUID] = field(default_factory=list)
    leased: LeasedWork | None = None  # None: the write did not return (yet)

    def take(self, n: int) -> int:
        """Take up to `n` free slots of `queue` now; returns how many were taken."""
        k = self.reserve(n) if n > 0 else 0
        self.taken += k
        return k

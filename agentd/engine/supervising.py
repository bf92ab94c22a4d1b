"""How one claimed job's task runs and ends: cancellations told apart, crashes contained.

Guarantee: a lost lease or a pause/stop/regenerate cancels the job quietly (it wrote
nothing); shutdown's cancellation propagates; a crash is logged, never re-raised into the
worker; the job's outcome is recorded once; what its finalizer leased to this worker is
settled (run, or handed back if it was cancelled); its lease is always unregistered.
Tolerates: a cancellation at any await of the pipeline.
Never: swallows shutdown's cancellation.
Called by: engine.worker (Worker._run_turn, Worker._run_tool).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from agentd.engine.lease_renewer import Lease, LeaseRenewer
from agentd.engine.ticks import Signal
from agentd.states import ToolCallOutcome, TurnOutcome


async def supervise(
    run: Callable[[], Awaitable[None]],
    *,
    kind: str,
    info: dict[str, Any],
    lease: Lease | None,
    renewer: LeaseRenewer | None,
    bound: Any,
    outcome: Callable[[TurnOutcome | ToolCallOutcome], None],
    done: Signal,
    done_fields: Callable[[], dict[str, Any]],
    settle: Callable[[bool], None] | None,
) -> None:
    """Run one job's pipeline (see the module docstring). `info`: the worker's record of
    the task, where a pause/stop notes `cancelled_by`; `settle(cancelled)`: the chain's."""
    cancelled = False
    try:
        await run()
        bound.debug(f"{kind}.done", **done_fields())
    except asyncio.CancelledError:
        cancelled = True
        told = info.get("cancelled_by")  # a pause/stop/regenerate, not a lost lease
        lost = told is None and lease is not None and lease.lost
        why = lease.reason if lease is not None and lost else (told or "shutdown")
        # the same words in both vocabularies; the callers convert
        outcome(TurnOutcome.LEASE_LOST if lost else TurnOutcome.CANCELLED)
        bound.info(f"{kind}.cancelled", reason=why)
        if why == "shutdown":
            raise
    except Exception:
        outcome(TurnOutcome.FAILED)
        bound.exception(f"{kind}.crashed")
    finally:
        if settle is not None:
            settle(cancelled)
        if lease is not None and renewer is not None:
            renewer.unregister(lease)
        done.fire()

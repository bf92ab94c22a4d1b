"""Pause, stop and resume follow a loop down to its child loops (agents as tools).

Guarantee: in the transaction that pauses or stops a loop, every child under it that is
still live is paused (`paused_with_parent`) or stopped (`stopped_with_parent`), recursively;
resuming the loop resumes the children paused with it, and only those (a child a person
paused, or one paused at its own limit, stays paused). Interrupting the loop stops the
children whose calls the interrupt answered (their results could no longer reach it).
Detached children run on their own and are left alone.
Tolerates: a child finishing at the same instant (its row lock orders the two; a child
already at rest is skipped); a child paused or stopped by a person before its parent.
Never: locks a child before its parent (the engine's lock order: parent, then child).
Called by: Lifecycle.pause_in, stop_in and resume; engine.sending (interrupt).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentd.db.pool import Connection
from agentd.states import ACTIVE, LoopStatus, TransitionReason
from agentd.store import loops, tool_calls
from agentd.store.models import Loop, ToolCall

if TYPE_CHECKING:
    from agentd.engine.loop_ops import LoopOps


async def _attached(conn: Connection, parent: Loop) -> list[Loop]:
    """The parent's children its calls wait on or waited on (not the detached ones), each
    locked, oldest first."""
    kids = await loops.list_children(conn, parent_id=parent.id)
    if not kids:
        return []
    calls = {c.id: c for c in await tool_calls.list_for_loop(conn, loop_id=parent.id)}
    out = []
    for kid in kids:
        call = calls.get(kid.parent_tool_call_id or -1)
        if call is not None and call.metadata.get("detached"):
            continue
        locked = await loops.get_for_update(conn, loop_id=kid.id)
        if locked is not None:
            out.append(locked)
    return out


async def pause_children(lc: LoopOps, conn: Connection, parent: Loop) -> None:
    for kid in await _attached(conn, parent):
        if kid.status in ACTIVE or kid.status == LoopStatus.INIT:
            await lc.pause_in(conn, kid, TransitionReason.PAUSED_WITH_PARENT)


async def stop_children(lc: LoopOps, conn: Connection, parent: Loop) -> None:
    for kid in await _attached(conn, parent):
        if kid.status not in (LoopStatus.STOPPED, LoopStatus.COMPLETED, LoopStatus.FAILED):
            await lc.stop_in(conn, kid, TransitionReason.STOPPED_WITH_PARENT)


async def stop_children_of(lc: LoopOps, conn: Connection, calls: list[ToolCall]) -> None:
    """Stop the children that `calls` (answered without their result: an interrupt) were
    waiting on; the parent is locked by the caller."""
    for call in sorted(calls, key=lambda c: c.id):
        if call.child_loop_id is None or call.executed_at is not None:
            continue
        if call.metadata.get("detached"):
            continue
        kid = await loops.get_for_update(conn, loop_id=call.child_loop_id)
        if kid is not None and kid.status not in (
            LoopStatus.STOPPED,
            LoopStatus.COMPLETED,
            LoopStatus.FAILED,
        ):
            await lc.stop_in(conn, kid, TransitionReason.STOPPED_WITH_PARENT)


async def resume_children(lc: LoopOps, conn: Connection, parent: Loop) -> None:
    for kid in await _attached(conn, parent):
        if (
            kid.status == LoopStatus.PAUSED
            and kid.status_reason == TransitionReason.PAUSED_WITH_PARENT
        ):
            row = await lc.redispatch(conn, kid, TransitionReason.RESUMED)
            await lc.record(conn, row, "loop.resumed", TransitionReason.RESUMED)
            await resume_children(lc, conn, row)

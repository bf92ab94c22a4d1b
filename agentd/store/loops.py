"""Loop rows: insert, read, fenced transitions, lease renewal and reaper sweeps.

Guarantee: every write that belongs to a generation names its execution_token in the
WHERE clause and reports a lost fence as None/False, never raising.
Tolerates: concurrent workers, reapers and API calls on the same rows.
Never: holds a lock beyond the caller's transaction.
Called by: engine (worker, lifecycle, reaper, lease renewer) and api (reads). The lists,
searches, counts and cost sums the API and the admin show are in loop_reports.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from agentd import redact
from agentd.db.pool import Connection, Record
from agentd.states import LoopStatus, TransitionReason
from agentd.store import events, mcp
from agentd.store.models import Loop, NewEvent, ToolCall
from agentd.store.queries import sql


def _loop(rec: Record | None) -> Loop | None:
    return Loop.from_record(rec) if rec is not None else None


async def insert(
    conn: Connection,
    *,
    agent: str,
    subject: str | None,
    state: dict[str, Any],
    execution_token: UUID,
    title: str | None = None,
    observed: bool = False,
    agent_version: str | None = None,
) -> Loop:
    """`agent_version` None: the agent's newest recorded version (the 0025 trigger)."""
    rec = await conn.fetchrow(
        sql("loop_insert"), agent, subject, state, execution_token, title, observed, agent_version
    )
    return Loop.from_record(rec)


async def insert_with_id(
    conn: Connection,
    *,
    loop_id: UUID,
    agent: str,
    subject: str | None,
    state: dict[str, Any],
    execution_token: UUID,
    title: str | None = None,
    observed: bool = False,
    agent_version: str | None = None,
) -> Loop | None:
    """A new loop with this id, or None if one exists."""
    rec = await conn.fetchrow(
        sql("loop_insert_with_id"),
        agent, subject, state, execution_token, title, observed, loop_id, agent_version,
    )  # fmt: skip
    return _loop(rec)


async def get(conn: Connection, *, loop_id: UUID) -> Loop | None:
    return _loop(await conn.fetchrow(sql("loop_get"), loop_id))


async def get_for_update(conn: Connection, *, loop_id: UUID) -> Loop | None:
    return _loop(await conn.fetchrow(sql("loop_get_for_update"), loop_id))


async def lock_turn(conn: Connection, *, loop_id: UUID, execution_token: UUID) -> bool:
    """Take the loop's row lock if this turn still holds it (False: the fence is lost)."""
    return await conn.fetchval(sql("loop_lock_turn"), loop_id, execution_token) is not None


async def set_state(
    conn: Connection, *, loop_id: UUID, state_version: int, state: dict[str, Any]
) -> Loop | None:
    """Replace the state if it is still at `state_version` (None: the fence is lost)."""
    return _loop(await conn.fetchrow(sql("loop_set_state"), loop_id, state_version, state))


async def set_status(
    conn: Connection,
    *,
    loop_id: UUID,
    status: LoopStatus,
    execution_token: UUID | None,
    reason: str | None,
    error_message: str | None = None,
) -> Loop:
    rec = await conn.fetchrow(
        sql("loop_set_status"), loop_id, status, execution_token, reason, error_message
    )
    return Loop.from_record(rec)


async def set_flags(
    conn: Connection, *, loop_id: UUID, frozen: bool | None = None, observed: bool | None = None
) -> Loop | None:
    return _loop(await conn.fetchrow(sql("loop_set_flags"), loop_id, frozen, observed))


async def merge_state(conn: Connection, *, loop_id: UUID, patch: dict[str, Any]) -> Loop | None:
    """Merge `patch` into the loop's state (top-level keys replaced)."""
    return _loop(await conn.fetchrow(sql("loop_merge_state"), loop_id, patch))


@dataclass(frozen=True)
class FinalizedTurn:
    loop: Loop
    message_id: int
    jobs_enqueued: int
    # Calls inserted already leased to the finalizing worker (`own_tokens`), in position order.
    leased_calls: list[ToolCall] = field(default_factory=list)


async def finalize_turn_all(
    conn: Connection,
    *,
    loop_id: UUID,
    execution_token: UUID,
    tokens: tuple[int, int, int],
    estimated: bool,
    shell_message_id: int | None,
    message: dict[str, Any],
    calls: list[dict[str, Any]],
    sequential: bool,
    tool_lease_seconds: float,
    notify_tool: bool,
    turn_events: Sequence[NewEvent],
    attach: list[bool],
    own_tokens: Sequence[UUID] = (),
    worker_id: UUID | None = None,
    cost: Decimal | None = None,
    tokens_reasoning: int = 0,
    generation_seconds: float | None = None,
    discovered: mcp.Discovered | None = None,
) -> FinalizedTurn | None:
    """The whole LLM-turn finalize in one statement (`loop_finalize_turn_all`): loop,
    assistant message (shell promoted or inserted), tool calls, their jobs, events and the
    observers' notifications. None when the fence is lost: then nothing was written.
    The first len(own_tokens) calls are leased to `worker_id` instead of queued.
    `cost` (None: no price), `tokens_reasoning` and `generation_seconds` (None: not
    counted in the loop's tps) roll up into the loop's totals. `discovered`: MCP sessions
    and tools to record for the loop as `mcp.record_discovery` does."""
    # One named document (its fields are declared in the statement's `f`); json values
    # stay json, a uuid goes as its string, the cost as its exact decimal string.
    finalize = {
        "loop_id": loop_id,
        "execution_token": execution_token,
        "completed": not calls,
        "tokens_prompt": tokens[0],
        "tokens_completion": tokens[1],
        "tokens_cached": tokens[2],
        "tokens_estimated": estimated,
        "tokens_reasoning": tokens_reasoning,
        "cost": str(cost) if cost is not None else None,
        "generation_seconds": generation_seconds,
        "shell_id": shell_message_id,
        # The transcript never holds a known secret (redact.transcript): the model's answer,
        # its reasoning and its tool calls' arguments are stored (and so shown, and sent
        # in the next prompt) masked.
        "content": redact.transcript(message["content"]),
        "reasoning": redact.transcript(message["reasoning"]),
        "metadata": redact.transcript(message["metadata"]),
        "ttft": message["ttft"],
        "duration": message["duration"],
        "finish_reason": message["finish_reason"],
        "calls": [
            {
                "position": c["position"],
                "provider_call_id": c["provider_call_id"],
                "name": c["name"],
                "arguments": redact.transcript(c["arguments"]),
                "arguments_raw": redact.transcript(c["arguments_raw"]),
                "metadata": c["metadata"],
            }
            for c in calls
        ],
        "sequential": sequential,
        "tool_lease_seconds": tool_lease_seconds,
        "notify_tool": notify_tool,
        "own_tokens": own_tokens,
        "worker_id": worker_id,
        "events": events.documents(turn_events, attach),
        "mcp_sessions": discovered.sessions if discovered is not None else None,
        "mcp_tools": discovered.tools if discovered is not None else None,
    }
    rec = await conn.fetchrow(sql("loop_finalize_turn_all"), finalize)
    if rec is None:
        return None
    return FinalizedTurn(
        loop=Loop.from_record(rec),
        message_id=rec["message_id"],
        jobs_enqueued=rec["jobs_enqueued"],
        leased_calls=[ToolCall.from_json(t) for t in rec["leased_calls"]],
    )


async def finalize_compaction(
    conn: Connection,
    *,
    loop_id: UUID,
    execution_token: UUID,
    new_token: UUID,
    tokens: tuple[int, int, int],
    estimated: bool,
    cost: Decimal | None = None,
    tokens_reasoning: int = 0,
) -> Loop | None:
    """Back to queued on `new_token` after a summary; None when the fence is lost."""
    rec = await conn.fetchrow(
        sql("loop_finalize_compaction"),
        loop_id,
        execution_token,
        new_token,
        *tokens,
        estimated,
        cost,
        tokens_reasoning,
    )
    return _loop(rec)


async def insert_fork(
    conn: Connection,
    *,
    agent: str,
    subject: str | None,
    state: dict[str, Any],
    title: str | None,
    forked_from_loop_id: UUID,
    forked_from_message_id: int,
) -> Loop:
    rec = await conn.fetchrow(
        sql("loop_insert_fork"),
        agent,
        subject,
        state,
        title,
        forked_from_loop_id,
        forked_from_message_id,
    )
    return Loop.from_record(rec)


async def set_step_count(conn: Connection, *, loop_id: UUID, step_count: int) -> Loop:
    return Loop.from_record(await conn.fetchrow(sql("loop_set_step_count"), loop_id, step_count))


async def fenced_transition(
    conn: Connection,
    *,
    loop_id: UUID,
    execution_token: UUID,
    from_statuses: list[LoopStatus],
    status: LoopStatus,
    reason: str,
    error_message: str | None = None,
    new_token: UUID | None = None,
) -> Loop | None:
    rec = await conn.fetchrow(
        sql("loop_fenced_transition"),
        loop_id,
        execution_token,
        from_statuses,
        status,
        reason,
        redact.transcript(error_message),  # a tool's or provider's error text may echo one
        new_token,
    )
    return _loop(rec)


async def renew_leases(
    conn: Connection, *, ids: list[UUID], tokens: list[UUID], renew_within: float = 0.0
) -> dict[UUID, float | None]:
    """The leases still held, each with the seconds it has left (None: no lease, the turn's
    tool phase); one with less than half, or less than `renew_within`, left was renewed
    for its whole length."""
    rows = await conn.fetch(sql("loop_lease_renew_many"), ids, tokens, renew_within)
    return {r["id"]: r["remaining"] for r in rows}


async def release_leases(
    conn: Connection,
    *,
    ids: list[UUID],
    tokens: list[UUID],
    reason: str = TransitionReason.RELEASED_ON_SHUTDOWN,
) -> None:
    await conn.execute(sql("loop_release_leases"), ids, tokens, str(reason))


async def reap_expired(conn: Connection, *, dead_workers: list[UUID], limit: int) -> list[Any]:
    return list(await conn.fetch(sql("loop_reap_expired"), dead_workers, limit))


async def reap_queued(conn: Connection, *, threshold: float, grace: float, limit: int) -> int:
    return len(await conn.fetch(sql("loop_reap_queued"), threshold, limit, grace))


async def reap_gate(conn: Connection, *, grace: float, limit: int) -> int:
    return len(await conn.fetch(sql("loop_reap_gate"), grace, limit))


async def defer_turn(
    conn: Connection,
    *,
    loop_id: UUID,
    execution_token: UUID,
    run_at: datetime,
    reason: str,
) -> bool:
    """Hand a claimed turn back, queued on the same generation, due at `run_at`.

    False: the fence was lost (the turn was paused, stopped or reaped meanwhile).
    """
    rec = await conn.fetchrow(sql("loop_defer_turn"), loop_id, execution_token, run_at, reason)
    return rec is not None


async def set_concurrency(conn: Connection, *, loop_id: UUID, key: str, limit: int) -> Loop | None:
    return _loop(await conn.fetchrow(sql("loop_set_concurrency"), loop_id, key, limit))


# --- child loops (0032) -------------------------------------------------------------------


async def set_parent(
    conn: Connection, *, loop_id: UUID, parent_id: UUID, parent_tool_call_id: int, depth: int
) -> Loop:
    rec = await conn.fetchrow(
        sql("loop_set_parent"), loop_id, parent_id, parent_tool_call_id, depth
    )
    return Loop.from_record(rec)


async def count_child(conn: Connection, *, loop_id: UUID) -> None:
    await conn.execute(sql("loop_count_child"), loop_id)


async def list_children(conn: Connection, *, parent_id: UUID) -> list[Loop]:
    return [Loop.from_record(r) for r in await conn.fetch(sql("loop_list_children"), parent_id)]


async def tree_spend(conn: Connection, *, loop_id: UUID) -> tuple[int, Decimal | None]:
    """Tokens (prompt + completion) and cost of the loop and all its descendants."""
    rec = await conn.fetchrow(sql("loop_tree_spend"), loop_id)
    return int(rec["tokens"]), rec["cost"]

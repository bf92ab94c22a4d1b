"""Job rows: enqueue in the caller's transaction, claim with SKIP LOCKED.

Guarantee: a claim deletes the job and takes the turn (or tool lease) in one statement;
a stale job (wrong generation, frozen or moved-on loop) is dropped, never run; a loop whose
concurrency key is saturated is never claimed and never blocks other keys' loops.
Tolerates: any number of workers claiming concurrently; duplicate jobs.
Never: sends NOTIFY on the worker's successor path (it serializes commits).
Called by: engine (worker, lifecycle, reaper), api via lifecycle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from agentd.db.pool import Connection, Record
from agentd.store.models import Loop, McpToolRow, Message, ToolCall
from agentd.store.queries import sql


@dataclass(frozen=True)
class TurnPrefetch:
    """What a claimed turn reads, fetched by the claim itself: the latest compaction summary
    and the visible messages after its coverage, their tool calls, the loop's MCP tools
    (with their session's fields) and sessions."""

    messages: list[Message]
    tool_calls: list[ToolCall]
    mcp_tools: list[McpToolRow]
    mcp_sessions: list[dict[str, Any]]
    # provider key id -> blocked_until, for every key inside a back-off at claim time
    backoffs: dict[str, datetime] = field(default_factory=dict)
    claimed_at: float = field(default_factory=time.monotonic)
    # Set: a delta — only the messages after this id (and their tool calls); the caller
    # holds the rest (engine/history_cache.py merges them).
    after: int | None = None
    # The worker's render memo for the loop (engine/transcript.py `Rendered`), when it holds one.
    rendered: Any = None
    # A delta read without the MCP tools and sessions (the worker said it holds them): the
    # two lists are empty until the worker fills them in (engine/worker.py).
    tools_omitted: bool = False


@dataclass(frozen=True)
class LlmClaim:
    job_id: int
    loop_id: UUID
    loop: Loop | None  # None: the job was stale and has been dropped, or not taken
    # False: a racing claim took its concurrency key's last slot; the job stays queued.
    taken: bool = True
    prefetch: TurnPrefetch | None = None


@dataclass(frozen=True)
class ToolClaim:
    job_id: int
    generation: UUID | None
    tool_call: ToolCall | None  # None: stale or duplicate job, dropped
    agent: str | None = None
    loop: Loop | None = None  # the call's loop as the claim saw it
    tool: McpToolRow | None = None  # the MCP tool the call names, if the loop has it


async def enqueue(
    conn: Connection,
    *,
    queue: str,
    kind: str,
    loop_id: UUID,
    generation: UUID | None,
    tool_call_id: int | None = None,
    lease_seconds: float | None = None,
    delay: float = 0.0,
    notify: bool = False,
) -> int:
    job_id: int = await conn.fetchval(
        sql("job_enqueue"), queue, kind, loop_id, tool_call_id, generation, lease_seconds, delay
    )
    if notify:
        await conn.execute(sql("job_notify"), queue)
    return job_id


async def notify(conn: Connection, *, queue: str) -> None:
    await conn.execute(sql("job_notify"), queue)


async def claim_llm(
    conn: Connection,
    *,
    execution_token: UUID,
    worker_id: UUID,
    default_lease: float,
    versions: list[str] | None = None,
) -> LlmClaim | None:
    """`versions`: the agent versions this process can run (None: any)."""
    rec = await conn.fetchrow(
        sql("job_claim_llm"), execution_token, worker_id, default_lease, versions
    )
    if rec is None:
        return None
    loop = Loop.from_record(rec) if rec["id"] is not None else None
    prefetch = turn_prefetch(rec) if loop is not None else None
    return LlmClaim(
        job_id=rec["job_id"],
        loop_id=rec["job_loop_id"],
        loop=loop,
        taken=rec["job_taken"],
        prefetch=prefetch,
    )


def turn_prefetch(rec: Record) -> TurnPrefetch:
    """A turn's context from the `prefetch_*` columns (agentd_turn_prefetch's)."""
    after = rec.get("prefetch_after")
    return TurnPrefetch(
        messages=[Message.from_json(m) for m in rec["prefetch_messages"] or []],
        tool_calls=[ToolCall.from_json(t) for t in rec["prefetch_tool_calls"] or []],
        mcp_tools=[McpToolRow.from_json(t) for t in rec["prefetch_mcp_tools"] or []],
        mcp_sessions=list(rec["prefetch_mcp_sessions"] or []),
        backoffs={
            k: datetime.fromisoformat(v) for k, v in (rec["prefetch_backoffs"] or {}).items()
        },
        after=after,
        tools_omitted=after is not None and rec["prefetch_mcp_tools"] is None,
    )


async def claim_tool(
    conn: Connection,
    *,
    lease_token: UUID,
    worker_id: UUID,
    default_lease: float,
    versions: list[str] | None = None,
) -> ToolClaim | None:
    """`versions`: the agent versions this process can run (None: any)."""
    rec = await conn.fetchrow(
        sql("job_claim_tool"), lease_token, worker_id, default_lease, versions
    )
    if rec is None:
        return None
    tc = ToolCall.from_record(rec) if rec["id"] is not None else None
    loop = Loop.from_json(rec["prefetch_loop"]) if rec["prefetch_loop"] is not None else None
    tool = rec["prefetch_mcp_tool"]
    return ToolClaim(
        job_id=rec["job_id"],
        generation=rec["job_generation"],
        tool_call=tc,
        agent=rec["loop_agent"],
        loop=loop,
        tool=McpToolRow.from_json(tool) if tool is not None else None,
    )


async def depth(conn: Connection) -> dict[str, tuple[int, float]]:
    return {
        r["queue"]: (r["depth"], float(r["oldest_age"])) for r in await conn.fetch(sql("job_depth"))
    }


async def list_for_loop(conn: Connection, *, loop_id: UUID) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(sql("job_list_for_loop"), loop_id)]


async def delete_for_loop(conn: Connection, *, loop_id: UUID) -> None:
    await conn.execute(sql("job_delete_for_loop"), loop_id)

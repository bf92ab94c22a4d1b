"""Job rows: enqueue in the caller's transaction, claim with SKIP LOCKED.

Guarantee: a claim deletes each job and takes its turn (or tool lease) in one call, for up
to MAX_CLAIM_BATCH jobs at once, loops in flight before loops' first turns;
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
from uuid import UUID, uuid4

from agentd.db.pool import Connection, Record
from agentd.store.models import Loop, McpToolRow, Message, ToolCall
from agentd.store.queries import sql

#: The most jobs one claim call takes, whatever the free slots: a claim's transaction holds
#: its jobs' loops locked until it commits, so it stays short.
MAX_CLAIM_BATCH = 64


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
    first_turn: bool = False,
) -> int:
    """`first_turn`: a loop's first turn, claimed after work already in flight."""
    job_id: int = await conn.fetchval(
        sql("job_enqueue"),
        queue,
        kind,
        loop_id,
        tool_call_id,
        generation,
        lease_seconds,
        delay,
        first_turn,
    )
    if notify:
        await conn.execute(sql("job_notify"), queue)
    return job_id


async def notify(conn: Connection, *, queue: str) -> None:
    await conn.execute(sql("job_notify"), queue)


async def claim_llm_many(
    conn: Connection,
    *,
    worker_id: UUID,
    default_lease: float,
    limit: int,
    versions: list[str] | None = None,
    execution_tokens: list[UUID] | None = None,
) -> list[LlmClaim]:
    """Up to `limit` (at most MAX_CLAIM_BATCH) LLM jobs claimed in one call, each with a
    fresh execution token (`execution_tokens`, else new ones); [] when none is ready.
    `versions`: the agent versions this process can run (None: any)."""
    n = max(0, min(limit, MAX_CLAIM_BATCH))
    tokens = execution_tokens[:n] if execution_tokens is not None else [uuid4() for _ in range(n)]
    if not tokens:
        return []
    recs = await conn.fetch(
        sql("job_claim_llm"), tokens, worker_id, default_lease, versions, len(tokens)
    )
    out: list[LlmClaim] = []
    for rec in recs:
        row = rec["claimed_loop"]
        loop = Loop.from_json(row) if row is not None else None
        out.append(
            LlmClaim(
                job_id=rec["job_id"],
                loop_id=rec["job_loop_id"],
                loop=loop,
                taken=rec["job_taken"],
                prefetch=turn_prefetch(rec) if loop is not None else None,
            )
        )
    return out


async def claim_llm(
    conn: Connection,
    *,
    execution_token: UUID,
    worker_id: UUID,
    default_lease: float,
    versions: list[str] | None = None,
) -> LlmClaim | None:
    """One LLM job claimed with `execution_token` (claim_llm_many with a limit of one)."""
    got = await claim_llm_many(
        conn,
        worker_id=worker_id,
        default_lease=default_lease,
        limit=1,
        versions=versions,
        execution_tokens=[execution_token],
    )
    return got[0] if got else None


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


async def claim_tool_many(
    conn: Connection,
    *,
    worker_id: UUID,
    default_lease: float,
    limit: int,
    versions: list[str] | None = None,
    lease_tokens: list[UUID] | None = None,
) -> list[ToolClaim]:
    """Up to `limit` (at most MAX_CLAIM_BATCH) tool jobs claimed in one statement, each call
    leased with a fresh token (`lease_tokens`, else new ones); [] when none is ready.
    `versions`: the agent versions this process can run (None: any)."""
    n = max(0, min(limit, MAX_CLAIM_BATCH))
    tokens = lease_tokens[:n] if lease_tokens is not None else [uuid4() for _ in range(n)]
    if not tokens:
        return []
    recs = await conn.fetch(
        sql("job_claim_tool"), tokens, worker_id, default_lease, versions, len(tokens)
    )
    return [_tool_claim(rec) for rec in recs]


def _tool_claim(rec: Record) -> ToolClaim:
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


async def claim_tool(
    conn: Connection,
    *,
    lease_token: UUID,
    worker_id: UUID,
    default_lease: float,
    versions: list[str] | None = None,
) -> ToolClaim | None:
    """One tool job claimed with `lease_token` (claim_tool_many with a limit of one)."""
    got = await claim_tool_many(
        conn,
        worker_id=worker_id,
        default_lease=default_lease,
        limit=1,
        versions=versions,
        lease_tokens=[lease_token],
    )
    return got[0] if got else None


async def depth(conn: Connection) -> dict[str, tuple[int, float]]:
    return {
        r["queue"]: (r["depth"], float(r["oldest_age"])) for r in await conn.fetch(sql("job_depth"))
    }


async def list_for_loop(conn: Connection, *, loop_id: UUID) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(sql("job_list_for_loop"), loop_id)]


async def delete_for_loop(conn: Connection, *, loop_id: UUID) -> None:
    await conn.execute(sql("job_delete_for_loop"), loop_id)

"""Tool call rows: creation, per-call leases, the executed_at checkpoint, approvals.

Guarantee: one checkpointed result per call (executed_at is set once, under the lease
token); a response is recorded once; a pending decision is taken once.
Tolerates: duplicate jobs, racing approve/deny, workers dying mid-call.
Never: invokes anything; re-running a tool is the engine's decision.
Called by: engine (pipelines, lifecycle, reaper), api (approvals, transcript).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from agentd import redact
from agentd.db.pool import Connection, Record
from agentd.store import events, jobs
from agentd.store.jobs import TurnPrefetch
from agentd.store.models import Loop, NewEvent, ToolCall
from agentd.store.queries import sql


def _tc(rec: Record | None) -> ToolCall | None:
    return ToolCall.from_record(rec) if rec is not None else None


async def insert_many(
    conn: Connection, *, loop_id: UUID, message_id: int, calls: list[dict[str, Any]]
) -> list[ToolCall]:
    rows = await conn.fetch(
        sql("tool_call_insert_many"),
        loop_id,
        message_id,
        [c["position"] for c in calls],
        [c["provider_call_id"] for c in calls],
        [c["name"] for c in calls],
        [c["arguments"] for c in calls],
        [c["arguments_raw"] for c in calls],
        [c["metadata"] for c in calls],
    )
    return [ToolCall.from_record(r) for r in rows]


async def get(conn: Connection, *, tool_call_id: int) -> ToolCall | None:
    return _tc(await conn.fetchrow(sql("tool_call_get"), tool_call_id))


async def get_for_update(conn: Connection, *, tool_call_id: int) -> ToolCall | None:
    return _tc(await conn.fetchrow(sql("tool_call_get_for_update"), tool_call_id))


async def list_for_loop(conn: Connection, *, loop_id: UUID) -> list[ToolCall]:
    return [
        ToolCall.from_record(r) for r in await conn.fetch(sql("tool_call_list_for_loop"), loop_id)
    ]


async def list_unresolved(conn: Connection, *, loop_id: UUID) -> list[ToolCall]:
    return [
        ToolCall.from_record(r) for r in await conn.fetch(sql("tool_call_list_unresolved"), loop_id)
    ]


async def live_leases(conn: Connection, *, loop_id: UUID) -> set[int]:
    """The ids of the loop's unanswered calls whose lease has not expired (database clock)."""
    return {r["id"] for r in await conn.fetch(sql("tool_call_list_live_leases"), loop_id)}


async def checkpoint(
    conn: Connection,
    *,
    tool_call_id: int,
    lease_token: UUID,
    result: str,
    structured: Any,
    is_success: bool,
    error_message: str | None,
    duration: float | None,
) -> ToolCall | None:
    return _tc(
        await conn.fetchrow(
            sql("tool_call_checkpoint"),
            tool_call_id,
            lease_token,
            redact.transcript(result),  # a tool's result never stores a known secret
            redact.transcript(structured),
            is_success,
            redact.transcript(error_message),
            duration,
        )
    )


async def fail(conn: Connection, *, tool_call_id: int, error_message: str) -> ToolCall | None:
    """Mark an unanswered call failed by a crash (the loop fails with it)."""
    return _tc(
        await conn.fetchrow(sql("tool_call_fail"), tool_call_id, redact.transcript(error_message))
    )


@dataclass(frozen=True)
class Finished:
    message_id: int
    tool_jobs: int  # sequential: the next call's job was enqueued
    llm_jobs: int  # the last result: the loop is queued for its next turn
    executed_at: datetime | None
    # Chained: the loop's next turn, claimed for `chain_worker`, and what it reads.
    chained: Loop | None = None
    prefetch: TurnPrefetch | None = None


@dataclass(frozen=True)
class Checkpoint:
    """A result ToolExecution hands to ResponseCreation to record in the same statement."""

    result: str
    structured: Any
    is_success: bool
    error_message: str | None
    duration: float


def finish_document(
    *,
    tool_call_id: int,
    loop_id: UUID,
    lease_token: UUID,
    generation: UUID,
    checkpoint: Checkpoint | None,
    sequential: bool,
    new_token: UUID,
    status_reason: str,
    llm_lease_seconds: float | None,
    tool_lease_seconds: float | None,
    notify_llm: bool,
    notify_tool: bool,
    call_events: Sequence[NewEvent],
    attach: list[bool],
    chain_worker: UUID | None = None,
    chain_after: int | None = None,
    chain_tools: bool = True,
) -> dict[str, Any]:
    """The document `tool_call_finish` takes for the end of a tool call: optionally the
    checkpoint, the tool message, responded, the continuation, events, notifications.
    `chain_tools` False (with `chain_after`): the chained turn's read leaves out the loop's
    MCP tools and sessions, which the worker holds."""
    cp = checkpoint
    # One named document (its fields are declared in store/sql/functions/tool_call_finish.sql); json
    # values stay json, a uuid goes as its string (the json codec writes it).
    finish = {
        "id": tool_call_id,
        "loop_id": loop_id,
        "lease_token": lease_token,
        "generation": generation,
        "checkpoint": cp is not None,
        # A tool's result never stores a known secret (redact.transcript), as `checkpoint`.
        "result": redact.transcript(cp.result) if cp else None,
        "structured": redact.transcript(cp.structured) if cp else None,
        "is_success": cp.is_success if cp else None,
        "error_message": redact.transcript(cp.error_message) if cp else None,
        "duration": cp.duration if cp else None,
        "sequential": sequential,
        "new_token": new_token,
        "status_reason": status_reason,
        "llm_lease_seconds": llm_lease_seconds,
        "tool_lease_seconds": tool_lease_seconds,
        "notify_llm": notify_llm,
        "notify_tool": notify_tool,
        "chain_worker": chain_worker,
        "chain_after": chain_after,
        "chain_tools": chain_tools,
        "events": events.documents(call_events, attach),
    }
    return finish


async def finish(conn: Connection, **document: Any) -> Finished | None:
    """The end of a tool call in one round trip (`tool_call_finish`; `document`: the
    arguments of `finish_document`). None when a fence is lost (generation, lease, already
    answered): nothing written."""
    return finished(await finish_row(conn, finish_document(**document)))


async def finish_row(conn: Connection, document: dict[str, Any]) -> Record | None:
    """`tool_call_finish` of one document (`finish_document`): its row, for `finished`."""
    return await conn.fetchrow(sql("tool_call_finish"), document)


async def finish_many(conn: Connection, documents: Sequence[dict[str, Any]]) -> list[Record | None]:
    """Several ends of tool calls in one statement and one commit (`tool_call_finish_many`):
    the row of each document, in their order (give each to `finished`). One document's
    failure fails them all, and then nothing was written."""
    out: list[Record | None] = [None] * len(documents)
    for rec in await conn.fetch(sql("tool_call_finish_many"), list(documents)):
        out[rec["idx"]] = rec
    return out


def finished(rec: Record | None) -> Finished | None:
    """What `tool_call_finish` returned for one document; None when a fence was lost."""
    if rec is None or rec["outcome"] != "ok":
        return None
    chained = rec["chained_loop"]
    return Finished(
        message_id=rec["message_id"],
        tool_jobs=rec["tool_jobs"],
        llm_jobs=rec["llm_jobs"],
        executed_at=rec["executed_at"],
        chained=Loop.from_json(chained) if chained is not None else None,
        prefetch=jobs.turn_prefetch(rec) if chained is not None else None,
    )


async def park(
    conn: Connection, *, tool_call_id: int, lease_token: UUID, deadline: datetime | None
) -> ToolCall | None:
    return _tc(await conn.fetchrow(sql("tool_call_park"), tool_call_id, lease_token, deadline))


async def decide(
    conn: Connection,
    *,
    tool_call_id: int,
    approval_status: str,
    decided_by: str | None,
    reason: str | None,
) -> ToolCall | None:
    return _tc(
        await conn.fetchrow(
            sql("tool_call_decide"), tool_call_id, approval_status, decided_by, reason
        )
    )


async def approve_edited(
    conn: Connection,
    *,
    tool_call_id: int,
    decided_by: str | None,
    reason: str | None,
    arguments: dict[str, Any],
) -> ToolCall | None:
    """Approve a pending call with a person's arguments (the model's are kept)."""
    return _tc(
        await conn.fetchrow(
            sql("tool_call_approve_edited"), tool_call_id, decided_by, reason, arguments
        )
    )


async def revoke_leases(conn: Connection, *, loop_id: UUID) -> None:
    await conn.execute(sql("tool_call_revoke_leases"), loop_id)


async def list_pending_approval(conn: Connection, *, loop_id: UUID) -> list[ToolCall]:
    return [
        ToolCall.from_record(r)
        for r in await conn.fetch(sql("tool_call_list_pending_approval"), loop_id)
    ]


async def count_pending_approval(conn: Connection, *, loop_id: UUID) -> int:
    return int(await conn.fetchval(sql("tool_call_count_pending_approval"), loop_id))


async def reap_stalled(
    conn: Connection, *, dead_workers: list[UUID], grace: float, limit: int
) -> list[Any]:
    return list(await conn.fetch(sql("tool_call_reap_stalled"), dead_workers, grace, limit))


async def expire_approvals(conn: Connection, *, limit: int) -> list[Any]:
    return list(await conn.fetch(sql("tool_call_expire_approvals"), limit))


async def release_leases(conn: Connection, *, ids: list[int], tokens: list[UUID]) -> None:
    await conn.execute(sql("tool_call_release_leases"), ids, tokens)


async def release_own(conn: Connection, *, loop_id: UUID, tokens: list[UUID]) -> None:
    await conn.execute(sql("tool_call_release_own"), loop_id, tokens)


async def renew_leases(
    conn: Connection,
    *,
    ids: list[int],
    tokens: list[UUID],
    seconds: list[float],
    renew_within: float = 0.0,
) -> dict[int, float | None]:
    """The leases still held, each with the seconds it has left (renewed when under half,
    or under `renew_within`)."""
    rows = await conn.fetch(sql("tool_call_lease_renew_many"), ids, tokens, seconds, renew_within)
    return {r["id"]: r["remaining"] for r in rows}


async def cancel_superseded(conn: Connection, *, loop_id: UUID) -> int:
    """Give each unanswered call of a superseded message a superseded `cancelled` result."""
    return int(await conn.fetchval(sql("tool_call_cancel_superseded"), loop_id))


async def interrupt_unresolved(conn: Connection, *, loop_id: UUID, text: str) -> list[ToolCall]:
    """Answer every unanswered call of the loop now: `text` for those that did not run."""
    rows = await conn.fetch(sql("tool_call_interrupt_unresolved"), loop_id, text)
    return [ToolCall.from_record(r) for r in rows]


# --- waiting on the world: MCP input requests and MCP tasks -------------------------------


async def park_input(
    conn: Connection, *, tool_call_id: int, lease_token: UUID, input_request: dict[str, Any]
) -> ToolCall | None:
    return _tc(
        await conn.fetchrow(sql("tool_call_park_input"), tool_call_id, lease_token, input_request)
    )


async def answer_input(
    conn: Connection, *, tool_call_id: int, input_response: dict[str, Any], answered_by: str | None
) -> ToolCall | None:
    return _tc(
        await conn.fetchrow(
            sql("tool_call_answer_input"), tool_call_id, input_response, answered_by
        )
    )


async def list_pending_input(conn: Connection, *, loop_id: UUID) -> list[ToolCall]:
    return [
        ToolCall.from_record(r)
        for r in await conn.fetch(sql("tool_call_list_pending_input"), loop_id)
    ]


async def schedule_task_poll(
    conn: Connection,
    *,
    tool_call_id: int,
    lease_token: UUID,
    task_id: str,
    task_state: dict[str, Any],
    generation: UUID,
    delay: float,
) -> ToolCall | None:
    return _tc(
        await conn.fetchrow(
            sql("tool_call_schedule_task_poll"),
            tool_call_id,
            lease_token,
            task_id,
            task_state,
            generation,
            delay,
        )
    )


async def link_child(
    conn: Connection, *, tool_call_id: int, lease_token: UUID, child_loop_id: UUID, park: bool
) -> ToolCall | None:
    """Record the child loop the call started; `park`: and wait for it, lease dropped."""
    return _tc(
        await conn.fetchrow(
            sql("tool_call_link_child"), tool_call_id, lease_token, child_loop_id, park
        )
    )

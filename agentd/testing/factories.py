"""Rows in any state, for tests: loops, messages, tool calls, jobs and workers.

Rows are written with the store's own functions, then pushed into the wanted state with
one UPDATE per row. Times are given relative to the database clock (`lease_in=-1` is a
lease that expired a second ago, `updated_ago=60` a row last touched a minute ago), so no
test ever waits for time to pass. This module writes states no production path writes
directly; its statements are store/fixtures.py's, which nothing in production calls.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from agentd.db.pool import Connection
from agentd.states import (
    TERMINAL,
    ApprovalStatus,
    JobQueue,
    LoopStatus,
    ToolCallStatus,
    TransitionReason,
)
from agentd.store import fixtures, jobs, loops, mcp, messages, tool_calls
from agentd.store.models import Loop, Message, ToolCall


async def db_now(conn: Connection) -> datetime:
    return await fixtures.clock(conn)


async def _at(conn: Connection, seconds: float | None) -> datetime | None:
    if seconds is None:
        return None
    return await db_now(conn) + timedelta(seconds=seconds)


async def loop(
    conn: Connection,
    *,
    agent: str = "calc",
    status: str = LoopStatus.RUNNING,
    state: dict[str, Any] | None = None,
    execution_token: uuid.UUID | None = None,
    lease_in: float | None = None,
    lease_seconds: float = 12.0,
    worker_id: uuid.UUID | None = None,
    step_count: int = 0,
    frozen: bool = False,
    updated_ago: float = 0.0,
    user_message: str | None = "hello",
    status_reason: str | None = None,
) -> Loop:
    """A loop in any state. `lease_in` seconds from now (negative: already expired)."""
    token = execution_token or uuid.uuid4()
    row = await loops.insert(
        conn, agent=agent, subject=None, state=state or {}, execution_token=token
    )
    if user_message is not None:
        await messages.insert(conn, loop_id=row.id, role="user", content=user_message)
    forced = await fixtures.force(
        conn,
        "loops",
        row.id,
        {
            "status": status,
            "status_reason": status_reason,
            "execution_token": None if status in (*TERMINAL, LoopStatus.PAUSED) else token,
            "lease_expires_at": await _at(conn, lease_in),
            "lease_seconds": lease_seconds,
            "worker_id": worker_id,
            "step_count": step_count,
            "frozen": frozen,
            "updated_at": await _at(conn, -updated_ago),
        },
    )
    return Loop.from_record(forced)


async def set_loop(conn: Connection, loop_id: uuid.UUID, **values: Any) -> Loop:
    """Force columns of a loop (`updated_ago=` and `lease_in=` are accepted as seconds)."""
    if "updated_ago" in values:
        values["updated_at"] = await _at(conn, -values.pop("updated_ago"))
    if "lease_in" in values:
        values["lease_expires_at"] = await _at(conn, values.pop("lease_in"))
    return Loop.from_record(await fixtures.force(conn, "loops", loop_id, values))


async def shell(
    conn: Connection,
    loop_row: Loop,
    *,
    content: str = "partial",
    execution_token: uuid.UUID | None = None,
    updated_ago: float = 0.0,
) -> Message:
    """A hidden `processing` assistant shell, as a streaming turn leaves it."""
    token = execution_token or loop_row.execution_token or uuid.uuid4()
    # Written directly: tests need shells of any generation (orphans), which the store's
    # fenced insert refuses.
    row = Message.from_record(
        await fixtures.shell(
            conn, loop_id=loop_row.id, step=loop_row.step_count + 1, execution_token=token
        )
    )
    await messages.update_partial(
        conn, message_id=row.id, content=content, reasoning=None, execution_token=token
    )
    forced = await fixtures.force(
        conn, "messages", row.id, {"updated_at": await _at(conn, -updated_ago)}
    )
    return Message.from_record(forced)


async def assistant(
    conn: Connection, loop_row: Loop, *, step: int | None = None, content: str = ""
) -> Message:
    """A canonical (visible) assistant message for `step` (default: the loop's step)."""
    return await messages.insert(
        conn,
        loop_id=loop_row.id,
        role="assistant",
        content=content,
        step=step if step is not None else max(loop_row.step_count, 1),
        execution_token=loop_row.execution_token,
    )


async def tool_call(
    conn: Connection,
    loop_row: Loop,
    *,
    message: Message | None = None,
    name: str = "add",
    arguments: dict[str, Any] | None = None,
    position: int | None = None,
    status: str = ToolCallStatus.PENDING,
    result: str | None = None,
    executed: bool = False,
    is_success: bool = True,
    lease_token: uuid.UUID | None = None,
    leased_in: float | None = None,
    lease_worker_id: uuid.UUID | None = None,
    responded: bool = False,
    approval_status: str | None = None,
    approval_deadline_in: float | None = None,
    updated_ago: float = 0.0,
    sequential: bool = False,
) -> ToolCall:
    """A tool call in any state: checkpointed (`executed`), leased, answered (`responded`),
    or parked for approval (`approval_status="pending"`)."""
    if message is None:  # the turn's assistant message, shared by its calls
        step = max(loop_row.step_count, 1)
        found = await fixtures.visible_assistant(conn, loop_id=loop_row.id, step=step)
        message = Message.from_record(found) if found else await assistant(conn, loop_row)
    if position is None:
        position = await fixtures.tool_call_count(conn, message_id=message.id)
    (row,) = await tool_calls.insert_many(
        conn,
        loop_id=loop_row.id,
        message_id=message.id,
        calls=[
            {
                "position": position,
                "provider_call_id": f"call_{uuid.uuid4().hex[:8]}",
                "name": name,
                "arguments": arguments if arguments is not None else {"a": 1, "b": 2},
                "arguments_raw": None,
                "metadata": {"sequential": sequential},
            }
        ],
    )
    values: dict[str, Any] = {
        "status": status,
        "lease_token": lease_token,
        "leased_until": await _at(conn, leased_in),
        "lease_worker_id": lease_worker_id,
    }
    if executed or responded:
        values.update(
            status=ToolCallStatus.COMPLETED if is_success else ToolCallStatus.FAILED,
            result=result if result is not None else "3",
            is_success=is_success,
            executed_at=await db_now(conn),
        )
    if approval_status is not None:
        values.update(
            approval_required=True,
            approval_status=approval_status,
            approval_deadline=await _at(conn, approval_deadline_in),
            status=ToolCallStatus.WAITING
            if approval_status == ApprovalStatus.PENDING
            else values["status"],
        )
    forced = ToolCall.from_record(await fixtures.force(conn, "tool_calls", row.id, values))
    if responded:
        msg = await messages.insert_tool_result(
            conn,
            loop_id=loop_row.id,
            content=forced.result or "",
            tool_call_id=forced.id,
            metadata={"is_success": forced.is_success, "tool_name": forced.name},
        )
        assert msg is not None
        forced = ToolCall.from_record(
            await fixtures.force(
                conn,
                "tool_calls",
                row.id,
                {"response_message_id": msg.id, "lease_token": None, "leased_until": None},
            )
        )
    if updated_ago:
        forced = ToolCall.from_record(
            await fixtures.force(
                conn,
                "tool_calls",
                row.id,
                {"updated_at": await _at(conn, -updated_ago)},
            )
        )
    return forced


async def job(
    conn: Connection,
    *,
    loop_id: uuid.UUID,
    generation: uuid.UUID | None,
    tool_call_id: int | None = None,
    lease_seconds: float | None = None,
    first_turn: bool = False,
) -> int:
    """A job row: an LLM turn, or (with `tool_call_id`) a tool call; `first_turn`: a loop's
    first turn (claimed after work in flight)."""
    return await jobs.enqueue(
        conn,
        queue=JobQueue.TOOL if tool_call_id is not None else JobQueue.LLM,
        kind="tool_call" if tool_call_id is not None else "llm_turn",
        loop_id=loop_id,
        generation=generation,
        tool_call_id=tool_call_id,
        lease_seconds=lease_seconds,
        first_turn=first_turn,
    )


async def worker(
    conn: Connection,
    *,
    dead: bool = False,
    heartbeat_ago: float = 0.0,
    queues: list[str] | None = None,
) -> uuid.UUID:
    """A worker registry row. `dead=True`: its heartbeat backend does not exist."""
    worker_id = uuid.uuid4()
    # Alive: this connection's backend stands in for the worker's heartbeat connection.
    await fixtures.worker(
        conn,
        worker_id=worker_id,
        queues=queues or ["llm", "tool"],
        dead=dead,
        heartbeat_ago=heartbeat_ago,
    )
    return worker_id


async def mcp_tools(
    conn: Connection, loop_id: uuid.UUID, *, mcp_name: str = "calc", names: dict[str, bool]
) -> None:
    """Record a loop's discovered tools (name -> requires_approval) without discovery."""
    session = await mcp.upsert_session(
        conn,
        loop_id=loop_id,
        mcp_name=mcp_name,
        session_id=None,
        transport_kind="local",
        metadata={},
    )
    await fixtures.mcp_tools(conn, loop_id=loop_id, session_id=session, names=names)


async def finalize_answer(
    conn: Connection,
    loop_id: uuid.UUID,
    token: uuid.UUID,
    *,
    content: str = "done",
    tokens: tuple[int, int, int] = (1, 1, 0),
) -> loops.FinalizedTurn | None:
    """What ResponseParsing commits for a final answer (no tool calls), fenced by `token`:
    None when the fence is lost."""
    return await loops.finalize_turn_all(
        conn,
        loop_id=loop_id,
        execution_token=token,
        tokens=tokens,
        estimated=False,
        shell_message_id=None,
        message={
            "content": content,
            "reasoning": None,
            "metadata": {},
            "ttft": None,
            "duration": 0.0,
            "finish_reason": "stop",
        },
        calls=[],
        sequential=False,
        tool_lease_seconds=30.0,
        notify_tool=False,
        turn_events=[],
        attach=[],
    )


def finish_arguments(
    loop_row: Loop,
    call: ToolCall,
    *,
    lease_token: uuid.UUID | None = None,
    checkpoint: tool_calls.Checkpoint | None = None,
    **changes: Any,
) -> dict[str, Any]:
    """The arguments of `tool_calls.finish` (or `finish_document`) for the end of `call`
    by the worker holding its lease (`lease_token`, default the call's own): no events, no
    notifications, 30-s leases, a new generation for the next turn; `changes` override."""
    args: dict[str, Any] = {
        "tool_call_id": call.id,
        "loop_id": loop_row.id,
        "lease_token": lease_token or call.lease_token,
        "generation": loop_row.execution_token,
        "checkpoint": checkpoint,
        "sequential": False,
        "new_token": uuid.uuid4(),
        "status_reason": TransitionReason.TOOLS_RESOLVED,
        "llm_lease_seconds": 30.0,
        "tool_lease_seconds": 30.0,
        "notify_llm": False,
        "notify_tool": False,
        "call_events": [],
        "attach": [],
    }
    args.update(changes)
    return args

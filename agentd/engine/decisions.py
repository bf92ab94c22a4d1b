"""Decisions on parked tool calls: a person's approval or denial, an answer to an MCP
server's input request, and the dispatch of the decided call.

Guarantee: a decision is taken once, under the loop's row lock and then the call's (the
engine's lock order), in the transaction that enqueues the decided call and records its
event; repeating the same decision changes nothing.
Tolerates: a decision racing pause, stop or the reaper's deadline (the loop lock orders
them; a paused loop runs the decided call on resume).
Never: runs a call the loop is not live for; locks the call before its loop.
Called by: Lifecycle.decide and Lifecycle.answer_input (api routes, admin, tests).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agentd.db.pool import Connection, transaction
from agentd.engine import approval_edits, dispatch, inputs
from agentd.errors import AlreadyDecided, BadRequest, ToolCallNotFound
from agentd.states import ApprovalStatus, InputStatus, LoopStatus, TransitionReason
from agentd.store import events, loops, mcp, tool_calls
from agentd.store.models import Loop, NewEvent, ToolCall

if TYPE_CHECKING:
    from agentd.engine.loop_ops import LoopOps


async def _locked_call(lc: LoopOps, conn: Connection, tool_call_id: int) -> tuple[Loop, ToolCall]:
    """The call and its loop, both locked: the loop first (the engine's lock order)."""
    peek = await tool_calls.get(conn, tool_call_id=tool_call_id)
    if peek is None:
        raise ToolCallNotFound(f"no tool call {tool_call_id}")
    loop = await lc.locked(conn, peek.loop_id)
    tc = await tool_calls.get_for_update(conn, tool_call_id=tool_call_id)
    assert tc is not None
    return loop, tc


async def decide(
    lc: LoopOps,
    tool_call_id: int,
    *,
    approve: bool,
    reason: str | None = None,
    decided_by: str | None = None,
    arguments: dict[str, Any] | None = None,
) -> ToolCall:
    """Approve or deny a parked tool call. Repeating the same decision is harmless.

    `arguments` (approve only): run the call with these instead of the model's, checked
    against the tool's input schema (docs/approvals.md). Approving again with other
    arguments than the ones that were approved is AlreadyDecided.
    """
    wanted = ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED
    if arguments is not None and not approve:
        raise BadRequest("arguments can only be given when approving")
    async with transaction(lc.pool) as conn:
        loop, tc = await _locked_call(lc, conn, tool_call_id)
        if tc.approval_status == wanted:
            if arguments is not None and arguments != tc.arguments:
                raise AlreadyDecided(
                    f"tool call {tool_call_id} was already approved with other arguments",
                    approval_status=tc.approval_status,
                )
            return tc
        if tc.approval_status != ApprovalStatus.PENDING:
            state = tc.approval_status or (
                "not awaiting a decision" if tc.executed_at is None else "already run"
            )
            raise AlreadyDecided(
                f"tool call {tool_call_id} is {state}", approval_status=tc.approval_status
            )
        if arguments is not None and arguments != tc.arguments:
            tools = await mcp.list_tools(conn, loop_id=loop.id)
            schema = next((t.input_schema for t in tools if t.name == tc.name), None)
            decided = await tool_calls.approve_edited(
                conn,
                tool_call_id=tc.id,
                decided_by=decided_by,
                reason=reason,
                arguments=approval_edits.check(tc.name, schema, arguments),
            )
        else:
            decided = await tool_calls.decide(
                conn,
                tool_call_id=tc.id,
                approval_status=wanted,
                decided_by=decided_by,
                reason=reason,
            )
        assert decided is not None
        await run_decided(conn, loop, decided, TransitionReason.APPROVAL_DECIDED)
        await events.insert_many(
            conn,
            [
                NewEvent(
                    name=f"tool_call.{wanted}",
                    loop_id=loop.id,
                    tool_call_id=tc.id,
                    reason=TransitionReason.APPROVAL_DECIDED,
                    log=decision_log(reason, decided),
                )
            ],
        )
        await events.publish(
            conn,
            {
                "type": "approval",
                "loop_id": str(loop.id),
                "tool_call_id": tc.id,
                "decision": wanted,
            },
        )
        return decided


async def answer_input(
    lc: LoopOps,
    tool_call_id: int,
    *,
    action: str | None = None,
    content: dict[str, Any] | None = None,
    responses: dict[str, dict[str, Any]] | None = None,
    answered_by: str | None = None,
) -> ToolCall:
    """Answer an MCP server's input request on a parked call and re-enqueue the call;
    the retry carries the answer. Repeating the same answer is harmless."""
    async with transaction(lc.pool) as conn:
        loop, tc = await _locked_call(lc, conn, tool_call_id)
        if tc.input_status == InputStatus.PENDING and tc.response_message_id is None:
            response = inputs.build_response(
                tc.input_request, action=action, content=content, responses=responses
            )
        elif tc.input_status == InputStatus.ANSWERED and tc.input_response is not None:
            response = inputs.build_response(
                tc.input_request, action=action, content=content, responses=responses
            )
            if response == tc.input_response:
                return tc
            raise AlreadyDecided(
                f"tool call {tool_call_id} already has a different answer"
                f" (round {tc.input_rounds})",
                input_status=tc.input_status,
            )
        else:
            state = "already run" if tc.executed_at is not None else "not waiting for input"
            raise AlreadyDecided(
                f"tool call {tool_call_id} is {state}", input_status=tc.input_status
            )
        answered = await tool_calls.answer_input(
            conn, tool_call_id=tc.id, input_response=response, answered_by=answered_by
        )
        assert answered is not None
        await run_decided(conn, loop, answered, TransitionReason.INPUT_ANSWERED)
        actions = sorted({a["action"] for a in response["inputResponses"].values()})
        await events.insert_many(
            conn,
            [
                NewEvent(
                    name="tool_call.input_answered",
                    loop_id=loop.id,
                    tool_call_id=tc.id,
                    reason=TransitionReason.INPUT_ANSWERED,
                    log=f"round={tc.input_rounds} action={','.join(actions)}",
                )
            ],
        )
        await events.publish(
            conn,
            {
                "type": "input",
                "loop_id": str(loop.id),
                "tool_call_id": tc.id,
                "actions": actions,
            },
        )
        return answered


async def run_decided(conn: Connection, loop: Loop, call: ToolCall, reason: str) -> None:
    """A person decided a parked call: run it now if the loop is live (a paused loop runs
    it on resume), and leave `waiting` once nobody else is waited for."""
    if loop.status not in (LoopStatus.RUNNING, LoopStatus.WAITING) or not loop.execution_token:
        return
    await dispatch.enqueue_tools(
        conn,
        None,
        loop_id=loop.id,
        generation=loop.execution_token,
        calls=[call],
        lease_seconds=None,
        notify=True,
    )
    if loop.status == LoopStatus.WAITING and not await tool_calls.count_pending_approval(
        conn, loop_id=loop.id
    ):
        await loops.fenced_transition(
            conn,
            loop_id=loop.id,
            execution_token=loop.execution_token,
            from_statuses=[LoopStatus.WAITING],
            status=LoopStatus.RUNNING,
            reason=reason,
            new_token=loop.execution_token,
        )


def decision_log(reason: str | None, call: ToolCall) -> str | None:
    """The event's log: the reason, and for an edited approval both argument sets."""
    if call.approved_arguments is None:
        return reason
    return json.dumps(
        {
            "reason": reason,
            "requested_arguments": call.requested_arguments,
            "approved_arguments": call.approved_arguments,
        }
    )


def awaiting_person(call: ToolCall) -> bool:
    """A parked call: only a person's decision or answer makes it runnable again."""
    return (
        call.approval_status == ApprovalStatus.PENDING or call.input_status == InputStatus.PENDING
    )

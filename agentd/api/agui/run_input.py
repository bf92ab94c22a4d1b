"""POST of an AG-UI `RunAgentInput`: start or continue the thread (= the loop) with the
input's new user messages and state, then answer with the run's stream."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from agentd.api import auth, hygiene
from agentd.api.agui.live import stream
from agentd.api.problems import ApiProblem
from agentd.api.routes_loops import app_state
from agentd.db.pool import connection, transaction
from agentd.engine import loop_state
from agentd.errors import LoopNotFound
from agentd.store import loops, messages


class RunInput(BaseModel):
    """The members of an AG-UI `RunAgentInput` agentd reads (the others, `tools`,
    `context`, `forwardedProps`, ..., are accepted and ignored)."""

    model_config = ConfigDict(extra="allow")

    threadId: hygiene.CleanStr = Field(max_length=200, description="The loop id (a UUID).")
    runId: hygiene.CleanStr = Field(max_length=200)
    state: hygiene.JsonObject | None = None
    messages: list[hygiene.JsonObject] = Field(default_factory=list, max_length=10_000)


def _text(content: Any) -> str:
    """A user message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


async def run(
    request: Request, body: RunInput, *, agent: str | None, loop_id: UUID | None
) -> Response:
    """Start or continue the thread `body.threadId` (= the loop id) with the input's new
    user messages and state, then answer with the AG-UI stream of that run.

    A message is new unless its id is an agentd message id of the loop (what the stream's
    snapshots carry); each new one is sent once (its AG-UI id is the send's idempotency
    key, so a retried POST adds nothing): as the first message of a new loop, or to a loop
    at rest (which continues), or `queue`d on a working one. `state`, an object, is merged
    into the loop's state (JSON merge patch) while the loop is at rest."""
    try:
        thread = UUID(body.threadId)
    except ValueError:
        raise ApiProblem(
            422,
            f"threadId {body.threadId!r} is not a UUID: agentd uses the loop id as the thread "
            "id (start a thread with a new UUID)",
            problem_type="validation-error",
        ) from None
    if loop_id is not None and thread != loop_id:
        raise ApiProblem(
            422,
            f"threadId {thread} is not this loop ({loop_id})",
            problem_type="validation-error",
        )
    state = app_state(request)
    async with connection(state.pool) as conn:
        loop = await loops.get(conn, loop_id=thread)
        known = (
            {str(m.id) for m in await messages.list_(conn, loop_id=thread, include_hidden=True)}
            if loop is not None
            else set()
        )
    if loop is not None and agent is not None and loop.agent != agent:
        raise ApiProblem(
            422,
            f"thread {thread} is a loop of agent {loop.agent!r}, not {agent!r}",
            problem_type="validation-error",
        )
    new = [
        (str(m.get("id") or ""), _text(m.get("content")))
        for m in body.messages
        if m.get("role") == "user" and str(m.get("id") or "") not in known
    ]
    new = [(mid, text) for mid, text in new if text.strip()]
    by = auth.caller(request)
    if loop is None:
        if agent is None:
            raise LoopNotFound(f"no loop {thread}")
        if not new:
            raise ApiProblem(
                422, "a new thread needs a user message", problem_type="validation-error"
            )
        first_id, first = new.pop(0)
        async with transaction(state.pool) as conn:
            await state.lifecycle.start_in(
                conn,
                agent=agent,
                message=first,
                state=body.state or {},
                observe=True,
                loop_id=thread,
                message_key=f"ag-ui:{first_id}" if first_id else None,
            )
    elif body.state:
        current = loop.state if isinstance(loop.state, dict) else {}
        if loop_state.merge_patch(current, body.state) != current:
            await loop_state.patch(state.pool, thread, body.state, if_match=None, by=by)
    for mid, text in new:
        await state.lifecycle.send(
            thread,
            text,
            mode="queue",
            idempotency_key=f"ag-ui:{mid}" if mid else None,
            sent_by=by,
        )
    return await stream(request, thread, None)

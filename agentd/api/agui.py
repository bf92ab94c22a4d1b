"""GET /v1/loops/{id}/stream?protocol=ag-ui: a loop's live stream as AG-UI events.

The same live feed as the agentd stream (api/stream_hub.py: one shared LISTEN, per-loop
queues), mapped to the AG-UI protocol (https://docs.ag-ui.com, version AGUI_VERSION) so
an AG-UI front end (CopilotKit, ...) renders a loop as it runs. The JSON is written here,
camelCase as the protocol specifies; tests validate every event with the `ag-ui-protocol`
package's models, which the runtime does not need.

One connection is one AG-UI run of the thread `threadId` = the loop id:

- RUN_STARTED, MESSAGES_SNAPSHOT (the visible transcript), STATE_SNAPSHOT (loop state);
- streamed text: TEXT_MESSAGE_START / CONTENT (the live deltas) / END (at commit, with
  whatever the deltas did not carry), then the message's reasoning as REASONING_* and its
  tool calls as TOOL_CALL_START / ARGS / END; a tool result: TOOL_CALL_RESULT;
  a user message added meanwhile: a TEXT_MESSAGE_* of role user;
- status changes and approvals: CUSTOM `agentd.status` / `agentd.approval`;
- at rest: RUN_FINISHED (completed: success; paused: an interrupt naming the reason;
  stopped: cancelled) or RUN_ERROR (failed), after a STATE_SNAPSHOT if the state changed.

Message ids are agentd message ids, tool call ids agentd tool call ids (as in the REST
API), both as strings.

Event ids (`Last-Event-ID`): `<A>.<N>.<k>`, where A anchors the run (runId = `<loop>:<A>`),
N is the highest committed message id sent, k a counter; `.<M>.<L>` is appended while text
message M is open with L characters sent. The run's last event is `<A>.<N>.end`. Resuming
continues the run without a second RUN_STARTED: messages after N are sent (tool results
of the newest turn may come twice, as on the agentd stream), an open message gets the rest
of its text at commit. Resuming after `.end` with nothing new answers 204 (an EventSource
stops reconnecting); if the loop moved on, a new run starts (with a fresh snapshot).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from agentd.api import auth, hygiene
from agentd.api.problems import ApiProblem
from agentd.api.routes_loops import app_state
from agentd.api.stream_hub import (
    END,
    KEEPALIVE_SECONDS,
    DeltaCursor,
    HeldStream,
    StreamHub,
    Subscription,
    newest_assistant,
    streaming_partial,
)
from agentd.db.pool import connection, transaction
from agentd.engine import loop_state
from agentd.errors import LoopNotFound
from agentd.json_types import JSONObject, JSONValue
from agentd.llm import prices
from agentd.states import LoopStatus
from agentd.store import loops, messages
from agentd.store.models import Loop, Message, ToolCall

AGUI_VERSION = "1.0"
_EVENT_ID = re.compile(r"^(\d{1,18})\.(\d{1,18})\.(?:(end)|\d{1,18}(?:\.(\d{1,18})\.(\d{1,18}))?)$")


@dataclass(frozen=True)
class Resume:
    anchor: int
    high: int
    ended: bool
    open_id: int | None
    open_len: int


def parse_last_event_id(value: str | None) -> Resume | None:
    if value is None or not value.strip():
        return None
    m = _EVENT_ID.match(value.strip())
    if m is None:
        raise ApiProblem(
            400,
            "Last-Event-ID is not an id this AG-UI stream sent (<A>.<N>.<k>[.<M>.<L>] or "
            "<A>.<N>.end)",
            problem_type="invalid-last-event-id",
        )
    return Resume(
        anchor=int(m.group(1)),
        high=int(m.group(2)),
        ended=m.group(3) is not None,
        open_id=int(m.group(4)) if m.group(4) else None,
        open_len=int(m.group(5) or 0),
    )


def _event(kind: str, **fields: JSONValue) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "timestamp": int(time.time() * 1000)}
    out.update({k: v for k, v in fields.items() if v is not None})
    return out


def _arguments(tc: ToolCall) -> str:
    if tc.arguments is not None:
        return json.dumps(tc.arguments)
    return tc.arguments_raw or ""


def _snapshot_messages(rows: list[Message], calls: list[ToolCall]) -> list[dict[str, Any]]:
    """The transcript as AG-UI messages (compaction summaries and superseded replies left
    out: they are not the conversation a person reads)."""
    by_message: dict[int, list[ToolCall]] = {}
    for c in calls:
        by_message.setdefault(c.message_id, []).append(c)
    out: list[dict[str, Any]] = []
    for m in rows:
        if m.superseded_at is not None or m.is_summary:
            continue
        if m.role == "user":
            out.append({"id": str(m.id), "role": "user", "content": m.content or ""})
        elif m.role == "assistant":
            msg: dict[str, Any] = {"id": str(m.id), "role": "assistant"}
            if m.content:
                msg["content"] = m.content
            own = by_message.get(m.id, [])
            if own:
                msg["toolCalls"] = [
                    {
                        "id": str(c.id),
                        "type": "function",
                        "function": {"name": c.name, "arguments": _arguments(c)},
                    }
                    for c in own
                ]
            out.append(msg)
        elif m.role == "tool" and m.tool_call_id is not None:
            out.append(
                {
                    "id": str(m.id),
                    "role": "tool",
                    "content": m.content or "",
                    "toolCallId": str(m.tool_call_id),
                }
            )
    return out


class AguiStream:
    """The frames of one AG-UI connection (the bookkeeping of streams.LoopStream)."""

    def __init__(
        self, request: Request, sub: Subscription, loop: Loop, resume: Resume | None
    ) -> None:
        self.state = app_state(request)
        self.hub: StreamHub = request.app.state.stream_hub
        self.sub = sub
        self.loop = loop
        self.resume = resume
        self.thread_id = str(loop.id)
        self.anchor = 0
        self.floor = 0  # as in LoopStream: every visible message <= floor was sent
        self.sent: set[int] = set()
        self.high = 0
        self.counter = 0
        # The text message open on the client: id, characters it has, and whether live
        # deltas may still be appended (not after a resume: the missed ones are lost).
        self.open_id: int | None = None
        self.open_text = ""
        self.open_len = 0
        self.open_live = True
        self.deltas = DeltaCursor()
        self.last_state: JSONObject = loop.state
        # Tokens of the model calls this run has sent, per model (RUN_FINISHED `usage`).
        self.usage: dict[str, dict[str, int]] = {}

    @property
    def run_id(self) -> str:
        return f"{self.thread_id}:{self.anchor}"

    def _frame(self, data: dict[str, Any], *, last: bool = False) -> str:
        if last:
            event_id = f"{self.anchor}.{self.high}.end"
        else:
            self.counter += 1
            event_id = f"{self.anchor}.{self.high}.{self.counter}"
            if self.open_id is not None:
                event_id += f".{self.open_id}.{self.open_len}"
        return f"id: {event_id}\ndata: {json.dumps(data, default=str)}\n\n"

    # --- text ------------------------------------------------------------------------

    def _open(self, message_id: int, role: str = "assistant") -> list[str]:
        self.open_id, self.open_text, self.open_len, self.open_live = message_id, "", 0, True
        return [self._frame(_event("TEXT_MESSAGE_START", messageId=str(message_id), role=role))]

    def _content(self, delta: str) -> list[str]:
        if not delta or self.open_id is None:
            return []  # an empty delta is allowed in 1.0, not by every older consumer
        self.open_text += delta
        self.open_len += len(delta)
        return [
            self._frame(_event("TEXT_MESSAGE_CONTENT", messageId=str(self.open_id), delta=delta))
        ]

    def _close(self) -> list[str]:
        if self.open_id is None:
            return []
        mid, self.open_id = self.open_id, None
        return [self._frame(_event("TEXT_MESSAGE_END", messageId=str(mid)))]

    def _on_delta(self, item: dict[str, Any]) -> list[str]:
        mid = item.get("message_id")
        if not isinstance(mid, int) or (mid <= self.floor or mid in self.sent):
            return []  # a late delta of a message already committed and sent
        delta = self.deltas.take(item)
        if delta is None:
            return []  # shown already (a partial read on joining, or a repeat)
        frames: list[str] = []
        if self.open_id != mid:
            frames += self._close()
            frames += self._open(mid)
        elif not self.open_live:
            return []
        if delta.gap:
            self.open_live = False  # a hole the client cannot fill: the commit does
            return frames
        return frames + self._content(delta.text)

    # --- committed messages ----------------------------------------------------------

    def _message(self, m: Message, calls: list[ToolCall]) -> list[str]:
        frames: list[str] = []
        if m.role == "user":
            frames += self._close()
            frames += self._open(m.id, role="user")
            frames += self._content(m.content or "")
            frames += self._close()
        elif m.role == "assistant":
            self._count(m)
            text = m.content or ""
            if self.open_id == m.id:
                streamed = self.open_len
                before = self.open_len - len(self.open_text)  # shown before a resume
                if self.open_text and not text.startswith(self.open_text, before):
                    streamed = len(text)  # deltas were cut short: nothing sane to append
                frames += self._content(text[streamed:])
                frames += self._close()
                frames += self._reasoning(m)
            else:
                frames += self._close()
                frames += self._reasoning(m)
                if text:
                    frames += self._open(m.id)
                    frames += self._content(text)
                    frames += self._close()
            for c in calls:
                cid = str(c.id)
                frames.append(
                    self._frame(
                        _event(
                            "TOOL_CALL_START",
                            toolCallId=cid,
                            toolCallName=c.name,
                            parentMessageId=str(m.id),
                        )
                    )
                )
                args = _arguments(c)
                if args:
                    frames.append(self._frame(_event("TOOL_CALL_ARGS", toolCallId=cid, delta=args)))
                frames.append(self._frame(_event("TOOL_CALL_END", toolCallId=cid)))
        elif m.role == "tool" and m.tool_call_id is not None:
            frames.append(
                self._frame(
                    _event(
                        "TOOL_CALL_RESULT",
                        messageId=str(m.id),
                        toolCallId=str(m.tool_call_id),
                        content=m.content or "",
                        role="tool",
                    )
                )
            )
        return frames

    def _count(self, m: Message) -> None:
        if m.tokens_prompt is None and m.tokens_completion is None:
            return
        meta = m.metadata if isinstance(m.metadata, dict) else {}
        usage = meta.get("usage") if isinstance(meta.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        named = usage.get("model")
        model = named if isinstance(named, str) else ""
        seen = self.usage.setdefault(model, {"input": 0, "output": 0, "cached": 0, "reasoning": 0})
        seen["input"] += m.tokens_prompt or 0
        seen["output"] += m.tokens_completion or 0
        seen["cached"] += m.tokens_cached or 0
        seen["reasoning"] += int(usage.get("tokens_reasoning") or 0)

    def _usage(self) -> list[dict[str, Any]] | None:
        """AG-UI TokenUsage entries: input and output are totals, cached and reasoning
        parts of them (as agentd counts them too)."""
        out = []
        for model, n in sorted(self.usage.items()):
            entry: dict[str, Any] = {
                "inputTokens": n["input"],
                "outputTokens": n["output"],
                "totalTokens": n["input"] + n["output"],
                "reasoningTokens": n["reasoning"],
                "cachedInputTokens": n["cached"],
            }
            if model:
                entry = {"model": model, **entry}
            out.append(entry)
        return out or None

    def _reasoning(self, m: Message) -> list[str]:
        if not m.reasoning:
            return []
        rid = f"{m.id}-reasoning"
        return [
            self._frame(_event("REASONING_START", messageId=rid)),
            self._frame(_event("REASONING_MESSAGE_START", messageId=rid, role="reasoning")),
            self._frame(_event("REASONING_MESSAGE_CONTENT", messageId=rid, delta=m.reasoning)),
            self._frame(_event("REASONING_MESSAGE_END", messageId=rid)),
            self._frame(_event("REASONING_END", messageId=rid)),
        ]

    async def _catch_up(self) -> list[str]:
        pool, loop_id = self.state.pool, self.loop.id
        rows = await self.hub.messages_after(pool, loop_id, self.floor)
        fresh = [m for m in rows if m.id not in self.sent]
        calls = await self.hub.tool_calls(pool, loop_id) if fresh else []
        by_message: dict[int, list[ToolCall]] = {}
        for c in calls:
            by_message.setdefault(c.message_id, []).append(c)
        frames: list[str] = []
        for m in fresh:
            if m.is_summary:
                self.sent.add(m.id)
                continue
            self.sent.add(m.id)
            self.high = max(self.high, m.id)  # the message's own events carry its id
            frames += self._message(m, by_message.get(m.id, []))
        newest = newest_assistant(rows)
        if newest > self.floor:
            self.floor = newest
            self.sent = {i for i in self.sent if i > newest}
        return frames

    # --- state and the end of the run --------------------------------------------------

    def _state_if_changed(self, loop: Loop) -> list[str]:
        if loop.state == self.last_state:
            return []
        self.last_state = loop.state
        return [self._frame(_event("STATE_SNAPSHOT", snapshot=loop.state))]

    def _finish(self, loop: Loop) -> list[str]:
        frames = self._close() + self._state_if_changed(loop)
        meta = {
            "agentd": {
                "status": loop.status,
                "reason": loop.status_reason,
                "status_reason": loop.status_reason,
                "stepCount": loop.step_count,
                "cost": prices.money(loop.cost),
            }
        }
        if loop.status == LoopStatus.FAILED:
            last = _event(
                "RUN_ERROR",
                message=loop.error_message or "the loop failed",
                code=loop.status_reason,
                metadata=meta,
                usage=self._usage(),
            )
        else:
            if loop.status == LoopStatus.PAUSED:
                reason = loop.status_reason or LoopStatus.PAUSED
                outcome: dict[str, Any] = {
                    "type": "interrupt",
                    "interrupts": [
                        {
                            "id": f"{self.thread_id}:{reason}:{loop.step_count}",
                            "reason": reason,
                            "message": loop.error_message
                            or "The loop is paused; resume it to continue.",
                        }
                    ],
                }
            elif loop.status == LoopStatus.STOPPED:
                outcome = {"type": "cancelled"}
            else:
                outcome = {"type": "success"}
            last = _event(
                "RUN_FINISHED",
                threadId=self.thread_id,
                runId=self.run_id,
                outcome=outcome,
                metadata=meta,
                usage=self._usage(),
            )
        return [*frames, self._frame(last, last=True)]

    async def _reload(self) -> Loop | None:
        row = await self.hub.loop(self.state.pool, self.loop.id)
        if row is not None:
            self.loop = row
        return row

    # --- the connection ----------------------------------------------------------------

    async def frames(self) -> AsyncIterator[str]:
        try:
            async for frame in self._frames():
                yield frame
        finally:
            await self.hub.unsubscribe(self.sub)

    async def _start(self, rows: list[Message]) -> list[str]:
        calls = await self.hub.tool_calls(self.state.pool, self.loop.id)
        visible = [m for m in rows if not m.hidden]
        return [
            self._frame(
                _event(
                    "RUN_STARTED",
                    threadId=self.thread_id,
                    runId=self.run_id,
                    protocolVersion=AGUI_VERSION,
                )
            ),
            self._frame(_event("MESSAGES_SNAPSHOT", messages=_snapshot_messages(visible, calls))),
            self._frame(_event("STATE_SNAPSHOT", snapshot=self.loop.state)),
        ]

    async def _frames(self) -> AsyncIterator[str]:
        rows = await self.hub.transcript(self.state.pool, self.loop.id)
        shell = streaming_partial(rows)
        rows = [m for m in rows if not m.hidden]
        resume = self.resume
        if resume is None or resume.ended:
            # A new run: it starts after every message there is now.
            self.floor = newest_assistant(rows)
            self.sent = {m.id for m in rows if m.id > self.floor}
            self.high = max((m.id for m in rows), default=0)
            self.anchor = self.high
            for frame in await self._start(rows):
                yield frame
        else:
            self.anchor = resume.anchor
            self.floor = newest_assistant(rows, at_most=resume.high)
            self.sent = {
                m.id for m in rows if self.floor < m.id <= resume.high and m.role != "tool"
            }
            self.high = resume.high
            if resume.open_id is not None:
                # Deltas carry offsets: the client's text goes on from where it stopped.
                self.open_id, self.open_len = resume.open_id, resume.open_len
                self.deltas.mark(resume.open_id, resume.open_len)
            for frame in await self._catch_up():
                yield frame
        loop = self.loop
        yield self._frame(
            _event(
                "CUSTOM",
                name="agentd.status",
                value=_status_value(loop.status, loop.status_reason),
            )
        )
        if loop.status in END:
            for frame in self._finish(loop):
                yield frame
            return
        if shell is not None and shell.content:
            # Joined (or resumed) mid-turn: the text not shown yet, then deltas after it.
            for frame in self._on_delta(
                {"message_id": shell.id, "offset": 0, "delta": shell.content}
            ):
                yield frame
        while True:
            try:
                item = await asyncio.wait_for(self.sub.queue.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            kind = item.get("type")
            if kind == "delta":
                for frame in self._on_delta(item):
                    yield frame
            elif kind == "message":
                for frame in await self._catch_up():
                    yield frame
            elif kind == "approval":
                value = {k: v for k, v in item.items() if k not in ("type", "loop_id")}
                yield self._frame(_event("CUSTOM", name="agentd.approval", value=value))
            elif kind in ("status", "resync", "state"):
                for frame in await self._catch_up():
                    yield frame
                row = await self._reload()
                if row is None:
                    return
                if kind == "resync":  # deltas missed meanwhile: from the saved partial
                    async with connection(self.state.pool) as conn:
                        rows = await messages.list_(conn, loop_id=self.loop.id, include_hidden=True)
                    shell = streaming_partial(rows)
                    if shell is not None:
                        for frame in self._on_delta(
                            {"message_id": shell.id, "offset": 0, "delta": shell.content}
                        ):
                            yield frame
                for frame in self._state_if_changed(row):
                    yield frame
                if kind == "state":
                    continue
                status = str(item.get("status")) if kind == "status" else row.status
                yield self._frame(
                    _event(
                        "CUSTOM",
                        name="agentd.status",
                        value=_status_value(status, item.get("reason", row.status_reason)),
                    )
                )
                if row.status in END and status in END:
                    for frame in self._finish(row):
                        yield frame
                    return


async def stream(request: Request, loop_id: UUID, last_event_id: str | None) -> Response:
    """The AG-UI stream of a loop (the route lives in api/streams.py)."""
    resume = parse_last_event_id(last_event_id)
    state = app_state(request)
    async with connection(state.pool) as conn:
        loop = await loops.get(conn, loop_id=loop_id)
        if loop is None:
            raise LoopNotFound(f"no loop {loop_id}")
        if resume is not None and resume.ended and loop.status in END:
            newer = await messages.list_after(conn, loop_id=loop_id, after_id=resume.high)
            if not newer:
                return Response(status_code=204)  # the run ended and nothing happened since
    hub: StreamHub = request.app.state.stream_hub
    sub = await hub.subscribe(loop_id)
    try:
        # As the agentd stream: read after LISTEN is up; write only to turn observing on.
        loop = await hub.loop(state.pool, loop_id)
        if loop is None:
            raise LoopNotFound(f"no loop {loop_id}")
        if not loop.observed and loop.status not in END:
            loop = await state.lifecycle.observe(loop_id, True)
    except BaseException:
        await hub.unsubscribe(sub)
        raise
    return HeldStream(
        AguiStream(request, sub, loop, resume).frames(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        on_close=[lambda: hub.unsubscribe(sub)],
    )


def _status_value(status: str, reason: object) -> dict[str, Any]:
    """`agentd.status`: `status_reason` is the loop resource's name; `reason` stays for
    clients written before it."""
    return {"status": status, "reason": reason, "status_reason": reason}


# --- input: POST of a RunAgentInput -----------------------------------------------------


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

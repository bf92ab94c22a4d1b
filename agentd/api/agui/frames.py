"""RunFrames: the frames of one AG-UI run and their ids, without I/O: streamed text,
committed messages (text, reasoning, tool calls and results), state and the run's end."""

from __future__ import annotations

import json
from typing import Any

from agentd.api.agui.events import arguments, event
from agentd.api.stream_hub import DeltaCursor
from agentd.json_types import JSONObject
from agentd.llm import prices
from agentd.states import LoopStatus
from agentd.store.models import Loop, Message, ToolCall


class RunFrames:
    """The bookkeeping of one run (as streams.LoopStream keeps it for the agentd stream)."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop
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
        return [self._frame(event("TEXT_MESSAGE_START", messageId=str(message_id), role=role))]

    def _content(self, delta: str) -> list[str]:
        if not delta or self.open_id is None:
            return []  # an empty delta is allowed in 1.0, not by every older consumer
        self.open_text += delta
        self.open_len += len(delta)
        return [
            self._frame(event("TEXT_MESSAGE_CONTENT", messageId=str(self.open_id), delta=delta))
        ]

    def _close(self) -> list[str]:
        if self.open_id is None:
            return []
        mid, self.open_id = self.open_id, None
        return [self._frame(event("TEXT_MESSAGE_END", messageId=str(mid)))]

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
                        event(
                            "TOOL_CALL_START",
                            toolCallId=cid,
                            toolCallName=c.name,
                            parentMessageId=str(m.id),
                        )
                    )
                )
                args = arguments(c)
                if args:
                    frames.append(self._frame(event("TOOL_CALL_ARGS", toolCallId=cid, delta=args)))
                frames.append(self._frame(event("TOOL_CALL_END", toolCallId=cid)))
        elif m.role == "tool" and m.tool_call_id is not None:
            frames.append(
                self._frame(
                    event(
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
            self._frame(event("REASONING_START", messageId=rid)),
            self._frame(event("REASONING_MESSAGE_START", messageId=rid, role="reasoning")),
            self._frame(event("REASONING_MESSAGE_CONTENT", messageId=rid, delta=m.reasoning)),
            self._frame(event("REASONING_MESSAGE_END", messageId=rid)),
            self._frame(event("REASONING_END", messageId=rid)),
        ]

    # --- state and the end of the run --------------------------------------------------

    def _state_if_changed(self, loop: Loop) -> list[str]:
        if loop.state == self.last_state:
            return []
        self.last_state = loop.state
        return [self._frame(event("STATE_SNAPSHOT", snapshot=loop.state))]

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
            last = event(
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
            last = event(
                "RUN_FINISHED",
                threadId=self.thread_id,
                runId=self.run_id,
                outcome=outcome,
                metadata=meta,
                usage=self._usage(),
            )
        return [*frames, self._frame(last, last=True)]

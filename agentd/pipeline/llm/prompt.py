"""Turns stored messages and tool calls into the dialect-neutral prompt history.

The prompt is `[system, summary?, messages after the summary's coverage...]`, of the rows
engine/transcript.py picks (the worker's transcript cache keeps the same ones). Every
later prompt extends the previous one, so the provider's prefix cache keeps hitting
(docs/long-loops.md: why not a sliding window).
Called by: NetworkCalling, Compaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentd.engine import transcript
from agentd.llm.types import Message, ToolCallRequest
from agentd.store.models import Message as MessageRow
from agentd.store.models import ToolCall

SUMMARY_HEADER = (
    "[Summary of the earlier conversation. The messages it covers are no longer shown; "
    "continue from it.]"
)


@dataclass(frozen=True)
class CompactionPlan:
    summary: MessageRow | None  # the summary being replaced, folded into the new one
    old: list[MessageRow]  # summarised away
    tail: list[MessageRow]  # kept verbatim

    @property
    def through(self) -> int:
        return self.old[-1].id


def plan_compaction(rows: list[MessageRow], keep_tail: int) -> CompactionPlan | None:
    """What a compaction would summarise and keep, or None when nothing can be summarised.

    The tail never starts with a tool result: an assistant message stays with its results.
    """
    summary, current = transcript.prompt_rows(rows)
    start = max(0, len(current) - max(0, keep_tail))
    while 0 < start < len(current) and current[start].role == "tool":
        start -= 1
    if start == 0:
        return None
    return CompactionPlan(summary=summary, old=current[:start], tail=current[start:])


def history(
    system_prompt: str,
    rows: list[MessageRow],
    calls: list[ToolCall],
    *,
    memo: transcript.Rendered | None = None,
) -> list[Message]:
    summary, current = transcript.prompt_rows(rows)
    return render(system_prompt, summary, current, calls, memo=memo)


def _same(a: tuple[ToolCall, ...], b: tuple[ToolCall, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def render(
    system_prompt: str,
    summary: MessageRow | None,
    rows: list[MessageRow],
    calls: list[ToolCall],
    *,
    memo: transcript.Rendered | None = None,
) -> list[Message]:
    by_message: dict[int, list[ToolCall]] = {}
    by_id: dict[int, ToolCall] = {}
    for c in calls:
        by_message.setdefault(c.message_id, []).append(c)
        by_id[c.id] = c
    out: list[Message] = []
    if memo is not None:
        rendered: list[Message] = []
        for row in rows:
            if row.hidden:
                continue
            if row.role == "assistant":
                used = tuple(by_message.get(row.id, ()))
            elif row.role == "tool" and row.tool_call_id in by_id:
                used = (by_id[row.tool_call_id],)
            else:
                used = ()
            hit = memo.get(row.id)
            if hit is not None and hit[0] is row and _same(hit[1], used):
                rendered.append(hit[2])
                continue
            (m,) = render("", None, [row], list(used))
            memo[row.id] = (row, used, m)
            rendered.append(m)
        head = render(system_prompt, summary, [], [])
        return [*head, *rendered]
    if system_prompt:
        out.append(Message(role="system", content=system_prompt))
    if summary is not None:
        # A user message, not a second system one: several chat templates (Qwen's among
        # them) refuse a system message anywhere but first.
        out.append(Message(role="user", content=f"{SUMMARY_HEADER}\n\n{summary.content or ''}"))
    for row in rows:
        if row.hidden:
            continue
        if row.role == "assistant":
            tcs = [
                ToolCallRequest(
                    id=c.provider_call_id,
                    name=c.name,
                    arguments=c.arguments if c.arguments is not None else {},
                    raw_arguments=c.arguments_raw or "",
                    metadata=c.metadata,
                )
                for c in sorted(by_message.get(row.id, []), key=lambda c: c.position)
            ]
            out.append(
                Message(
                    role="assistant",
                    content=row.content,
                    reasoning=row.reasoning,
                    tool_calls=tcs,
                    metadata=row.metadata or {},
                )
            )
        elif row.role == "tool":
            call = by_id.get(row.tool_call_id or -1)
            out.append(
                Message(
                    role="tool",
                    content=row.content,
                    tool_call_id=call.provider_call_id if call else None,
                    name=call.name if call else None,
                    is_error=bool(call and call.is_success is False),
                )
            )
        elif row.role in ("user", "system"):
            out.append(Message(role=row.role, content=row.content))  # type: ignore[arg-type]
    return out

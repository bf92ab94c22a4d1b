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
from agentd.llm.dialects import base as dialects
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
    summary, current = prompt_rows(rows, memo)
    return render(system_prompt, summary, current, calls, memo=memo)


def prompt_rows(
    rows: list[MessageRow], memo: transcript.Rendered | None = None
) -> tuple[MessageRow | None, list[MessageRow]]:
    """transcript.prompt_rows(rows), or what the history cache found for this very list."""
    split = memo.split if isinstance(memo, transcript.Rendered) else None
    if split is not None and split[0] is rows and split[1] == len(rows):
        return split[2], split[3]
    return transcript.prompt_rows(rows)


@dataclass(frozen=True)
class Last:
    """The prompt a memo built last, and what it was built from: a prompt whose rows and
    calls start with these (and whose new calls touch none of these rows) is these messages
    plus its new rows' (`_extends`), so it is checked and built in O(its new rows)."""

    system_prompt: str
    summary: MessageRow | None
    rows: list[MessageRow]
    calls: list[ToolCall]
    top: int  # the largest id of `rows` (0: none)
    unanswered: frozenset[int]  # tool_call_id of each tool row rendered without its call
    by_id: dict[int, ToolCall]
    by_message: dict[int, tuple[ToolCall, ...]]
    out: list[Message]


def _extends(
    last: Last, system_prompt: str, summary: MessageRow | None, rows: list[MessageRow],
    calls: list[ToolCall],
) -> bool:  # fmt: skip
    k, m = len(last.rows), len(last.calls)
    # List equality is an identity check per element for the objects the history cache
    # holds (C speed); rows or calls equal by value render the same.
    if (
        k > len(rows)
        or m > len(calls)
        or last.system_prompt != system_prompt
        or (last.summary is not summary and last.summary != summary)
        or rows[:k] != last.rows
        or calls[:m] != last.calls
    ):
        return False
    # A new call of an earlier row (or the call of a tool row shown without one) changes
    # how that row renders: build in full. Rows only get larger ids.
    return all(c.message_id > last.top and c.id not in last.unanswered for c in calls[m:])


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
    """The prompt messages of these rows. With `memo` (the history cache's, for a loop):
    each row's Message is reused while its row and calls are the same objects, and a
    prompt that extends the memo's last one renders only its new rows (`Last`)."""
    if memo is None:
        return _render(system_prompt, summary, rows, calls)
    last = memo.last if isinstance(memo, transcript.Rendered) else None
    if last is not None and _extends(last, system_prompt, summary, rows, calls):
        k, m = len(last.rows), len(last.calls)
        by_id, by_message = dict(last.by_id), dict(last.by_message)
        for c in calls[m:]:
            by_id[c.id] = c
            by_message[c.message_id] = (*by_message.get(c.message_id, ()), c)
        out, top, unanswered = list(last.out), last.top, set(last.unanswered)
    else:
        k = 0
        by_id, by_message = {}, {}
        for c in calls:
            by_id[c.id] = c
            by_message[c.message_id] = (*by_message.get(c.message_id, ()), c)
        head = [dialects.share(m) for m in _render(system_prompt, summary, [], [])]
        out, top, unanswered = head, 0, set()
    for row in rows[k:]:
        top = max(top, row.id)
        if row.hidden:
            continue
        if row.role == "assistant":
            used = by_message.get(row.id, ())
        elif row.role == "tool" and row.tool_call_id in by_id:
            used = (by_id[row.tool_call_id],)
        else:
            if row.role == "tool" and row.tool_call_id is not None:
                unanswered.add(row.tool_call_id)
            used = ()
        hit = memo.get(row.id)
        if hit is not None and hit[0] is row and _same(hit[1], used):
            out.append(hit[2])
            continue
        (msg,) = _render("", None, [row], list(used))
        memo[row.id] = (row, used, dialects.share(msg))
        out.append(msg)
    if isinstance(memo, transcript.Rendered):
        memo.last = Last(
            system_prompt=system_prompt,
            summary=summary,
            rows=list(rows),
            calls=list(calls),
            top=top,
            unanswered=frozenset(unanswered),
            by_id=by_id,
            by_message=by_message,
            out=list(out),
        )
    return out


def _render(
    system_prompt: str,
    summary: MessageRow | None,
    rows: list[MessageRow],
    calls: list[ToolCall],
) -> list[Message]:
    by_message: dict[int, list[ToolCall]] = {}
    by_id: dict[int, ToolCall] = {}
    for c in calls:
        by_message.setdefault(c.message_id, []).append(c)
        by_id[c.id] = c
    out: list[Message] = []
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

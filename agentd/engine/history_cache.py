"""The transcript a worker already holds, so a chained turn reads only what is new.

A turn records here the rows its prompt was built from (the latest summary and the rows
after its coverage, with their tool calls), keyed by loop and tagged with the turn's
execution token. When one of that turn's tool calls chains the next turn (ResponseCreation,
through the chain the worker offers it), `after(loop_id, generation)` is asked: only if the
call still runs on that token — no lifecycle action (regenerate, pause/resume, continue,
edit) rotated it since, and such actions are the only writes that change a stored row of
the prompt — does the chained prefetch read just the rows after the last id held
(migrations/0010); everything added since (the answer, tool results, a summary) has a
larger id. Anything else — a claim, a
token mismatch, an evicted entry, a restart, another worker's turn — reads in full.

Guarantee: the merged rows are what a full read would return (tests/integration/long_loops).
Never: trusts an entry for a different generation.
Called by: engine.worker (record, merge, and after() for the chain it offers a tool call).
"""

from __future__ import annotations

import collections
import uuid
from dataclasses import dataclass

from agentd.engine import transcript
from agentd.store.models import Message, ToolCall

MAX_LOOPS = 64  # each holds a transcript: a few chained loops per LLM slot


@dataclass(frozen=True)
class Entry:
    token: uuid.UUID
    last_id: int
    rows: list[Message]
    calls: list[ToolCall]
    rendered: transcript.Rendered  # the loop's rows as prompt messages


class HistoryCache:
    def __init__(self, max_loops: int = MAX_LOOPS) -> None:
        self.max_loops = max_loops
        self.entries: collections.OrderedDict[uuid.UUID, Entry] = collections.OrderedDict()
        self.hits = 0
        self.misses = 0

    def after(self, loop_id: uuid.UUID, generation: uuid.UUID) -> int | None:
        """The last message id held for the loop if it is valid on `generation`, else None."""
        e = self.entries.get(loop_id)
        if e is None or e.token != generation:
            return None
        return e.last_id

    def rendered(self, loop_id: uuid.UUID) -> transcript.Rendered | None:
        """The loop's render memo, for pipeline/llm/prompt.py (None: not held)."""
        e = self.entries.get(loop_id)
        return e.rendered if e is not None else None

    def merge(
        self, loop_id: uuid.UUID, after: int, rows: list[Message], calls: list[ToolCall]
    ) -> tuple[list[Message], list[ToolCall]] | None:
        """The held rows plus a delta read after `after`; None if the entry is gone or no
        longer at `after` (the caller then reads in full)."""
        e = self.entries.get(loop_id)
        if e is None or e.last_id != after:
            self.misses += 1
            return None
        self.hits += 1
        by_id = {c.id: c for c in e.calls}
        for c in calls:  # a delta's calls are newer versions of any held ones
            by_id[c.id] = c
        return [*e.rows, *rows], list(by_id.values())

    def record(
        self, loop_id: uuid.UUID, token: uuid.UUID, rows: list[Message], calls: list[ToolCall]
    ) -> None:
        """Hold what a turn's prompt is built from (only what later prompts can show)."""
        summary, current = transcript.prompt_rows(rows)
        kept = ([summary] if summary is not None else []) + current
        ids = {r.id for r in kept}
        call_ids = {r.tool_call_id for r in kept if r.tool_call_id is not None}
        held = [c for c in calls if c.message_id in ids or c.id in call_ids]
        last = max((r.id for r in rows), default=0)
        old = self.entries.get(loop_id)
        memo = old.rendered if old is not None else {}
        for stale in memo.keys() - ids:  # rows that left the prompt (compaction)
            del memo[stale]
        self.entries[loop_id] = Entry(
            token=token, last_id=last, rows=kept, calls=held, rendered=memo
        )
        self.entries.move_to_end(loop_id)
        while len(self.entries) > self.max_loops:
            self.entries.popitem(last=False)

    def drop(self, loop_id: uuid.UUID) -> None:
        self.entries.pop(loop_id, None)

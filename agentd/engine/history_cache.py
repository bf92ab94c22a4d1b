"""The transcript a worker already holds, so a chained turn reads only what is new.

A turn records here the rows its prompt was built from (the latest summary and the rows
after its coverage, with their tool calls), keyed by loop and tagged with the turn's
execution token. When one of that turn's tool calls chains the next turn (ResponseCreation,
through the chain the worker offers it), `after(loop_id, generation)` is asked: only if the
call still runs on that token — no lifecycle action (regenerate, pause/resume, continue,
edit) rotated it since, and such actions are the only writes that change a stored row of
the prompt — does the chained prefetch read just the rows after the last id held
(store/sql/functions/turn_prefetch.sql); everything added since (the answer, tool results,
a summary) has a larger id. Anything else — a claim, a
token mismatch, an evicted entry, a restart, another worker's turn — reads in full.

Guarantee: the merged rows are what a full read would return (tests/integration/long_loops).
Never: trusts an entry for a different generation.
Called by: engine.worker (record, merge, and after() for the chain it offers a tool call).
"""

from __future__ import annotations

import collections
import uuid
from dataclasses import dataclass
from typing import Any

from agentd.engine import transcript
from agentd.store.models import McpToolRow, Message, ToolCall

MAX_LOOPS = 64  # each holds a transcript: a few chained loops per LLM slot


@dataclass(frozen=True)
class Entry:
    token: uuid.UUID
    last_id: int
    rows: list[Message]  # [summary?, *current]: what prompt_rows() keeps
    calls: list[ToolCall]  # == list(by_id.values())
    rendered: transcript.Rendered  # the loop's rows as prompt messages
    by_id: dict[int, ToolCall]
    summary: Message | None
    current: list[Message]


@dataclass(frozen=True)
class _Merged:
    """What merge() returned, so that record() of those very lists extends the entry by
    the delta alone (O(new rows)) instead of filtering every row again."""

    loop_id: uuid.UUID
    entry: Entry
    rows: list[Message]
    calls: list[ToolCall]
    delta: list[Message]
    by_id: dict[int, ToolCall]


class HistoryCache:
    def __init__(self, max_loops: int = MAX_LOOPS) -> None:
        self.max_loops = max_loops
        self.entries: collections.OrderedDict[uuid.UUID, Entry] = collections.OrderedDict()
        self.hits = 0
        self.misses = 0
        self._merged: _Merged | None = None
        # loop -> (token, MCP tools, MCP sessions) of its last turn here, held only for
        # servers whose sessions the process shares (nothing in the rows can change under
        # them); kept and evicted with the loop's entry.
        self.tools: dict[uuid.UUID, tuple[uuid.UUID, list[McpToolRow], list[dict[str, Any]]]]
        self.tools = {}

    def after(self, loop_id: uuid.UUID, generation: uuid.UUID) -> int | None:
        """The last message id held for the loop if it is valid on `generation`, else None."""
        e = self.entries.get(loop_id)
        if e is None or e.token != generation:
            return None
        return e.last_id

    def hold_tools(
        self,
        loop_id: uuid.UUID,
        token: uuid.UUID,
        tools: list[McpToolRow],
        sessions: list[dict[str, Any]],
    ) -> None:
        """Hold the MCP tools and sessions a turn of the loop used (on `token`), for its
        chained next turn; only while the loop's transcript is held."""
        if loop_id in self.entries:
            self.tools[loop_id] = (token, tools, sessions)

    def tools_held(self, loop_id: uuid.UUID, generation: uuid.UUID) -> bool:
        """Whether tools are held for the loop's turn on `generation`."""
        held = self.tools.get(loop_id)
        return held is not None and held[0] == generation and loop_id in self.entries

    def held_tools(
        self, loop_id: uuid.UUID
    ) -> tuple[list[McpToolRow], list[dict[str, Any]]] | None:
        """The tools and sessions held for the loop (its last turn's here), or None."""
        held = self.tools.get(loop_id)
        return (held[1], held[2]) if held is not None else None

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
        by_id = dict(e.by_id)
        for c in calls:  # a delta's calls are newer versions of any held ones
            by_id[c.id] = c
        merged = [*e.rows, *rows], list(by_id.values())
        self._merged = _Merged(loop_id, e, merged[0], merged[1], list(rows), by_id)
        return merged

    def record(
        self, loop_id: uuid.UUID, token: uuid.UUID, rows: list[Message], calls: list[ToolCall]
    ) -> None:
        """Hold what a turn's prompt is built from (only what later prompts can show)."""
        m, self._merged = self._merged, None
        old = self.entries.get(loop_id)
        e = None
        if m is not None and m.loop_id == loop_id and m.rows is rows and m.calls is calls:
            e = self._extend(m, token) if old is m.entry else None
        if e is None:
            e = self._full(token, rows, calls, old)
        rows_split = (rows, len(rows), e.summary, e.current)
        e.rendered.split = rows_split
        self.entries[loop_id] = e
        self.entries.move_to_end(loop_id)
        while len(self.entries) > self.max_loops:
            gone, _ = self.entries.popitem(last=False)
            self.tools.pop(gone, None)

    @staticmethod
    def _extend(m: _Merged, token: uuid.UUID) -> Entry | None:
        """The entry merge() started from plus its delta, when the delta adds plain rows
        the prompt shows (not a summary: a compaction changes which rows it shows; not a
        hidden or superseded row, which a delta read never returns): else None, and
        record() filters every row as for a full read."""
        e = m.entry
        last = e.last_id
        for r in m.delta:
            if r.id <= last or r.hidden or r.summary_through or r.superseded_at is not None:
                return None
            last = r.id
        # Calls stay held while their row is (merge() kept the held ones, and a delta
        # brings only the calls of its rows and of the calls its results answer).
        return Entry(
            token=token,
            last_id=last,
            rows=[*e.rows, *m.delta],
            calls=m.calls,
            rendered=e.rendered,
            by_id=m.by_id,
            summary=e.summary,
            current=[*e.current, *m.delta],
        )

    @staticmethod
    def _full(
        token: uuid.UUID, rows: list[Message], calls: list[ToolCall], old: Entry | None
    ) -> Entry:
        summary, current = transcript.prompt_rows(rows)
        kept = ([summary] if summary is not None else []) + current
        ids = {r.id for r in kept}
        call_ids = {r.tool_call_id for r in kept if r.tool_call_id is not None}
        held = [c for c in calls if c.message_id in ids or c.id in call_ids]
        last = max((r.id for r in rows), default=0)
        memo = old.rendered if old is not None else transcript.Rendered()
        for stale in memo.keys() - ids:  # rows that left the prompt (compaction)
            del memo[stale]
        return Entry(
            token=token,
            last_id=last,
            rows=kept,
            calls=held,
            rendered=memo,
            by_id={c.id: c for c in held},
            summary=summary,
            current=current,
        )

    def drop(self, loop_id: uuid.UUID) -> None:
        self.entries.pop(loop_id, None)
        self.tools.pop(loop_id, None)

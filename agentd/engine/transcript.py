"""Which of a loop's stored rows its prompt shows, and the memo of those rows rendered.

The prompt is `[system, summary?, messages after the summary's coverage...]`: hidden rows
(streaming shells) and superseded rows (regenerate) never enter it, and of the compaction
summaries only the latest counts. The worker's transcript cache (engine/history_cache.py)
keeps exactly these rows; the LLM turn renders them (pipeline/llm/prompt.py).
Never: touches the database.
Called by: engine.history_cache, pipeline.llm (prompt, Compaction).
"""

from __future__ import annotations

from typing import Any

from agentd.llm.types import Message
from agentd.store.models import Message as MessageRow
from agentd.store.models import ToolCall


class Rendered(dict[int, tuple[MessageRow, tuple[ToolCall, ...], Message]]):
    """row id -> (the row, the tool calls it was rendered with, its Message): what
    `pipeline/llm/prompt.py::render` built for a row object the caller will pass again
    (engine/history_cache.py keeps one per loop), so a long loop's prompt re-renders only its
    new rows. An entry is reused only for the very same row and call objects; the Message is
    shared, so prompts are read, not mutated in place (middlewares replace ctx.history or its
    items).

    `last`: the whole prompt the memo built last (prompt.py `Last`), so a prompt that extends
    it is checked and built in O(its new rows) rather than row by row. `split`: the rows
    list the history cache last held (and its length then), and its prompt_rows():
    prompt.history reuses it for that very list instead of filtering every row again."""

    last: Any = None
    split: tuple[list[MessageRow], int, MessageRow | None, list[MessageRow]] | None = None


def prompt_rows(rows: list[MessageRow]) -> tuple[MessageRow | None, list[MessageRow]]:
    """(the latest compaction summary or None, the rows the prompt shows after it)."""
    live = [r for r in rows if not r.hidden and r.superseded_at is None]
    summary = None
    for r in live:
        if r.summary_through is not None and (summary is None or r.id > summary.id):
            summary = r
    through = summary.summary_through if summary is not None else 0
    return summary, [r for r in live if r.summary_through is None and r.id > (through or 0)]

"""Agents and helpers of the long-loop tests."""

from __future__ import annotations

import uuid

from agentd.db.pool import Pool, connection
from agentd.store import messages, tool_calls
from agentd.store.models import Loop, Message, ToolCall
from agentd.testing.agents import CalcAgent
from agentd.testing.engine import loop_row

TOKEN = "operator-token-for-long-loop-tests"


class CompactingAgent(CalcAgent):
    """Compacts once a prompt reaches 500 tokens, keeping the last 2 messages."""

    context_window = 1000
    compaction_threshold = 0.5
    compaction_keep_tail = 2


class BudgetAgent(CalcAgent):
    max_tokens_total = 100


def in_status(pool: Pool, loop_id: uuid.UUID, status: str):  # type: ignore[no-untyped-def]
    async def check() -> Loop | None:
        row = await loop_row(pool, loop_id)
        return row if row.status == status else None

    return check


async def history(pool: Pool, loop_id: uuid.UUID) -> tuple[list[Message], list[ToolCall]]:
    async with connection(pool) as conn:
        rows = await messages.list_(conn, loop_id=loop_id)
        calls = await tool_calls.list_for_loop(conn, loop_id=loop_id)
    return rows, calls

"""The end of a tool call writes one new version of the call's row
(agentd/store/sql/functions/tool_call_finish.sql)."""

from __future__ import annotations

import uuid

from agentd.db.pool import Pool, transaction
from agentd.store import tool_calls
from agentd.testing import factories


async def _finish(conn, loop, call, lease: uuid.UUID, cp: tool_calls.Checkpoint | None):  # type: ignore[no-untyped-def]
    return await tool_calls.finish(
        conn, **factories.finish_arguments(loop, call, lease_token=lease, checkpoint=cp)
    )


async def _updates_of_tool_calls(conn) -> int:  # type: ignore[no-untyped-def]
    # This transaction's own counts: visible at once, unlike the cumulative statistics.
    return int(
        await conn.fetchval(
            "SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'tool_calls'"
        )
    )


async def test_finish_with_a_folded_checkpoint_updates_the_call_once(pool: Pool) -> None:
    lease = uuid.uuid4()
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running", step_count=1)
        call = await factories.tool_call(
            conn, loop, status="running", lease_token=lease, leased_in=30
        )
    cp = tool_calls.Checkpoint(
        result="boom", structured={"x": 1}, is_success=False, error_message="boom", duration=0.5
    )
    async with transaction(pool) as conn:
        before = await _updates_of_tool_calls(conn)
        done = await _finish(conn, loop, call, lease, cp)
        assert done is not None
        assert await _updates_of_tool_calls(conn) - before == 1
        row = await conn.fetchrow("SELECT * FROM tool_calls WHERE id = $1", call.id)
        reply = await conn.fetchrow("SELECT * FROM messages WHERE id = $1", done.message_id)
    assert (row["result"], row["structured_result"], row["is_success"], row["status"]) == (
        "boom", {"x": 1}, False, "failed",
    )  # fmt: skip
    assert row["executed_at"] == done.executed_at is not None
    assert row["response_message_id"] == done.message_id and row["lease_token"] is None
    assert reply["content"] == "boom"
    assert reply["metadata"] == {"is_success": False, "tool_name": call.name}


async def test_finish_of_a_checkpointed_call_keeps_its_result(pool: Pool) -> None:
    lease = uuid.uuid4()
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running", step_count=1)
        call = await factories.tool_call(
            conn, loop, status="completed", result="42", executed=True, lease_token=lease,
            leased_in=30,
        )  # fmt: skip
    async with transaction(pool) as conn:
        before = await _updates_of_tool_calls(conn)
        done = await _finish(conn, loop, call, lease, None)
        assert done is not None
        assert await _updates_of_tool_calls(conn) - before == 1
        row = await conn.fetchrow("SELECT * FROM tool_calls WHERE id = $1", call.id)
        reply = await conn.fetchrow("SELECT * FROM messages WHERE id = $1", done.message_id)
    assert row["result"] == "42" and row["status"] == "completed"
    assert row["executed_at"] == done.executed_at is not None
    assert row["response_message_id"] == done.message_id
    assert reply["content"] == "42"
    assert reply["metadata"] == {"is_success": True, "tool_name": call.name}

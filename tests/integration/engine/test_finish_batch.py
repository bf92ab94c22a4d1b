"""Group commit of tool-call ends (engine/finish_batch.py): the ends that arrive while one
is being written share the next statement, each gets its own answer, and one end's error
is only its own."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from agentd.db.pool import Pool, transaction
from agentd.engine.finish_batch import FinishBatch
from agentd.errors import DatabaseError
from agentd.store import tool_calls
from agentd.store.models import Loop, ToolCall
from agentd.testing import factories


def _document(loop: Loop, call: ToolCall, lease: uuid.UUID) -> dict[str, Any]:
    cp = tool_calls.Checkpoint(
        result=f"r{call.id}", structured=None, is_success=True, error_message=None, duration=0.1
    )
    return tool_calls.finish_document(
        **factories.finish_arguments(loop, call, lease_token=lease, checkpoint=cp)
    )


async def _calls(pool: Pool, loops: int, per_loop: int) -> list[tuple[Loop, ToolCall, uuid.UUID]]:
    out = []
    async with transaction(pool) as conn:
        for _ in range(loops):
            loop = await factories.loop(conn, status="running", step_count=1)
            for _ in range(per_loop):
                lease = uuid.uuid4()
                call = await factories.tool_call(
                    conn, loop, status="running", lease_token=lease, leased_in=30
                )
                out.append((loop, call, lease))
    return out


async def _rows(pool: Pool, ids: list[int]) -> dict[int, Any]:
    async with transaction(pool) as conn:
        rows = await conn.fetch("SELECT * FROM tool_calls WHERE id = ANY($1::bigint[])", ids)
    return {r["id"]: r for r in rows}


async def test_ends_that_arrive_together_share_a_statement_and_each_gets_its_own_answer(
    pool: Pool,
) -> None:
    calls = await _calls(pool, loops=3, per_loop=3)
    batch = FinishBatch(pool)
    stale = calls[4]
    docs = [
        _document(loop, call, uuid.uuid4() if (loop, call, lease) == stale else lease)
        for loop, call, lease in calls
    ]
    rows = await asyncio.gather(*(batch.submit(d) for d in docs))
    done = [tool_calls.finished(r) for r in rows]
    # Handed over in the same moment: one statement for the nine (the writer starts on the
    # event loop's next turn, by which time all of them are waiting).
    assert (batch.statements, batch.ends) == (1, 9)
    assert done[4] is None  # a lease that is not the call's: fenced out, nothing written
    assert all(d is not None for i, d in enumerate(done) if i != 4)
    found = await _rows(pool, [c.id for _, c, _ in calls])
    for i, (_, call, _) in enumerate(calls):
        row = found[call.id]
        if i == 4:
            assert row["response_message_id"] is None and row["result"] is None
        else:
            assert row["result"] == f"r{call.id}" and row["response_message_id"] is not None
            assert row["response_message_id"] == done[i].message_id  # type: ignore[union-attr]
    # Each loop's last end queued its next turn once, whichever statement carried it.
    async with transaction(pool) as conn:
        turns = await conn.fetch(
            "SELECT loop_id, count(*) AS n FROM jobs WHERE queue = 'llm'"
            " AND loop_id = ANY($1::uuid[]) GROUP BY loop_id",
            list({loop.id for loop, _, _ in calls}),
        )
    answered_all = {loop.id for loop, _, _ in calls} - {stale[0].id}
    assert {r["loop_id"]: r["n"] for r in turns} == dict.fromkeys(answered_all, 1)


async def test_one_ends_error_is_only_its_own(pool: Pool) -> None:
    calls = await _calls(pool, loops=2, per_loop=2)
    batch = FinishBatch(pool)
    docs = [_document(loop, call, lease) for loop, call, lease in calls]
    docs[2] = {**docs[2], "id": "not a number"}  # the function refuses this document
    results = await asyncio.gather(*(batch.submit(d) for d in docs), return_exceptions=True)
    assert isinstance(results[2], DatabaseError)
    # The shared statement failed as a whole; each end was then written alone.
    assert all(tool_calls.finished(r) is not None for i, r in enumerate(results) if i != 2)  # type: ignore[arg-type]
    found = await _rows(pool, [c.id for _, c, _ in calls])
    assert [found[c.id]["result"] is not None for _, c, _ in calls] == [True, True, False, True]


async def test_a_caller_cancelled_while_it_waits_leaves_the_others_written(pool: Pool) -> None:
    calls = await _calls(pool, loops=3, per_loop=1)
    batch = FinishBatch(pool)
    docs = [_document(loop, call, lease) for loop, call, lease in calls]
    tasks = [asyncio.create_task(batch.submit(d)) for d in docs]
    await asyncio.sleep(0)  # all three handed over; the first is being written
    tasks[1].cancel()
    first, second, third = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(second, asyncio.CancelledError)
    assert tool_calls.finished(first) is not None  # type: ignore[arg-type]
    assert tool_calls.finished(third) is not None  # type: ignore[arg-type]
    # The cancelled caller's end may still commit, as a cancelled single statement may.
    found = await _rows(pool, [c.id for _, c, _ in calls])
    assert found[calls[0][1].id]["result"] and found[calls[2][1].id]["result"]
    # The batch is not stuck: a later end is written.
    more = await _calls(pool, loops=1, per_loop=1)
    ((loop, call, lease),) = more
    assert tool_calls.finished(await batch.submit(_document(loop, call, lease))) is not None


@pytest.mark.parametrize("n", [1, 70])
async def test_a_batch_never_exceeds_its_bound(pool: Pool, n: int) -> None:
    calls = await _calls(pool, loops=n, per_loop=1)
    batch = FinishBatch(pool)
    rows = await asyncio.gather(
        *(batch.submit(_document(loop, call, lease)) for loop, call, lease in calls)
    )
    assert all(tool_calls.finished(r) is not None for r in rows)
    assert batch.ends == n
    # 70 ends handed over at once: 64, then the last 6.
    assert batch.statements == (1 if n == 1 else 2)

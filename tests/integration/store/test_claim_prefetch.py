"""The LLM claim prefetches the turn's context: the prompt built from it is the prompt built
from a fresh read (summary, hidden and superseded rows, tool calls and results included)."""

from __future__ import annotations

import uuid

from agentd.db.pool import Pool, connection, transaction
from agentd.engine import transcript
from agentd.engine.lifecycle import Lifecycle
from agentd.pipeline.llm import prompt
from agentd.store import jobs, messages, tool_calls
from agentd.testing import agents
from agentd.testing.engine import fast_settings


async def test_claim_prefetch_builds_the_same_prompt_as_a_fresh_read(pool: Pool) -> None:
    lifecycle = Lifecycle(pool, agents.registry(), fast_settings())
    loop = await lifecycle.start(agent="calc", message="first", state={"llm": "http://x"})
    async with transaction(pool) as conn:
        a1 = await messages.insert(conn, loop_id=loop.id, role="assistant", content="old")
        await messages.insert(
            conn, loop_id=loop.id, role="system", content="the summary",
            summary_through=a1.id, metadata={"kind": "summary"},
        )  # fmt: skip
        a2 = await messages.insert(conn, loop_id=loop.id, role="assistant", content="calling")
        calls = await tool_calls.insert_many(
            conn,
            loop_id=loop.id,
            message_id=a2.id,
            calls=[
                {
                    "position": i,
                    "provider_call_id": f"c{i}",
                    "name": "add",
                    "arguments": {"a": i, "b": 1},
                    "arguments_raw": None,
                    "metadata": {"sequential": False},
                }
                for i in range(2)
            ],
        )
        for c in calls:
            await messages.insert_tool_result(
                conn, loop_id=loop.id, content=str(c.position + 1), tool_call_id=c.id,
                metadata={"is_success": True},
            )  # fmt: skip
        await messages.insert_shell(conn, loop_id=loop.id, step=3, execution_token=uuid.uuid4())
        await messages.insert(conn, loop_id=loop.id, role="user", content="and then?")
    async with connection(pool) as conn:
        claim = await jobs.claim_llm(
            conn, execution_token=uuid.uuid4(), worker_id=uuid.uuid4(), default_lease=30.0
        )
        rows = await messages.list_(conn, loop_id=loop.id)
        all_calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
    assert claim is not None and claim.loop is not None and claim.prefetch is not None
    pre = claim.prefetch
    assert transcript.prompt_rows(pre.messages) == transcript.prompt_rows(rows)
    assert prompt.history("sys", pre.messages, pre.tool_calls) == prompt.history(
        "sys", rows, all_calls
    )
    assert sorted(c.id for c in pre.tool_calls) == sorted(c.id for c in all_calls)
    assert [m.content for m in pre.messages] == [
        "the summary", "calling", "1", "2", "and then?"
    ]  # fmt: skip

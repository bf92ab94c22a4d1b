"""Compaction: a loop that nears its context window summarises its old history once, in a
fenced turn of its own, and later prompts extend [system, summary, tail] (no sliding)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from long_loops_kit import CompactingAgent, history, in_status

from agentd.db.pool import Pool, connection, transaction
from agentd.registry import AgentRegistry
from agentd.store import events, loops
from agentd.testing import factories
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, LastMessage, Reply, Rule, ToolCall

INSTRUCTION = CompactingAgent.compaction_prompt


def is_compaction(last: LastMessage) -> bool:
    return last.role == "user" and last.text == INSTRUCTION


def tool_result(text: str):  # type: ignore[no-untyped-def]
    return lambda last: last.role == "tool" and last.text == text


def script(fake: FakeLLM, *, stall_first_summary: bool = False) -> None:
    """Four model steps; the second reports a 600-token prompt, past the 500 threshold."""
    if stall_first_summary:
        fake.add(Rule(match=is_compaction, reply=Reply(delay_before_first_byte=60), times=1))
    fake.add(Rule(match=is_compaction, reply=Reply(content="SUMMARY-1", usage=(600, 20))))
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2})], usage=(300, 10)),
        )
    )
    fake.add(
        Rule(
            match=tool_result("3"),
            reply=Reply(tool_calls=[ToolCall("add", {"a": 3, "b": 4})], usage=(600, 10)),
        )
    )
    fake.add(
        Rule(
            match=tool_result("7"),
            reply=Reply(tool_calls=[ToolCall("add", {"a": 5, "b": 6})], usage=(100, 10)),
        )
    )
    fake.add(Rule(match=tool_result("11"), reply=Reply(content="done", usage=(150, 10))))


def messages_of(fake: FakeLLM) -> list[list[dict[str, Any]]]:
    return [r.json["messages"] for r in fake.requests]


async def test_loop_crossing_the_threshold_compacts_once_and_then_extends_a_stable_prefix(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="compacting", message="go", state={"llm": fake_llm.base_url}
        )
        done = await eventually(in_status(pool, loop.id, "completed"))
    rows, _ = await history(pool, loop.id)
    summaries = [m for m in rows if m.summary_through is not None]
    assert len(summaries) == 1
    (summary,) = summaries
    # Every original message stays on record; the summary is one more row.
    assert [(m.role, m.content) for m in rows if m.summary_through is None] == [
        ("user", "go"),
        ("assistant", ""),
        ("tool", "3"),
        ("assistant", ""),
        ("tool", "7"),
        ("assistant", ""),
        ("tool", "11"),
        ("assistant", "done"),
    ]
    tool3 = rows[2]
    assert summary.role == "system" and summary.content == "SUMMARY-1"
    assert summary.summary_through == tool3.id  # the tail (assistant + its result) is kept
    assert summary.tokens_prompt == 600 and summary.tokens_completion == 20
    assert done.step_count == 4  # the compaction turn is not a model step
    assert done.tokens_prompt == 300 + 600 + 600 + 100 + 150
    assert not done.tokens_estimated

    sent = messages_of(fake_llm)
    assert len(sent) == 5
    k = next(i for i, m in enumerate(sent) if m[-1]["content"] == INSTRUCTION)
    assert k == 2
    # The summary request extends the prompt the model last saw (its prefix is cached).
    assert sent[k][:-1] == sent[k - 1]
    after, later = sent[k + 1], sent[k + 2]
    assert after[0] == {"role": "system", "content": CompactingAgent.system_prompt}
    assert after[1]["role"] == "user" and after[1]["content"].endswith("\n\nSUMMARY-1")
    assert [m["role"] for m in after[2:]] == ["assistant", "tool"]
    assert after[2]["tool_calls"][0]["function"]["arguments"] == json.dumps({"a": 3, "b": 4})
    assert after[3]["content"] == "7"
    # Later prompts extend it: the same summary text, the same prefix, message for message.
    assert later[: len(after)] == after
    assert [m["role"] for m in later[len(after) :]] == ["assistant", "tool"]
    async with connection(pool) as conn:
        names = [e.name for e in await events.list_(conn, loop_id=loop.id, after_id=0, limit=500)]
    assert names.count("turn.compacted") == 1


async def test_compaction_turn_whose_worker_is_lost_summarises_again_and_commits_once(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script(fake_llm, stall_first_summary=True)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="compacting", message="go", state={"llm": fake_llm.base_url}
        )

        async def summarising() -> bool:
            return any(m[-1]["content"] == INSTRUCTION for m in messages_of(fake_llm))

        await eventually(summarising)
        stale = (await in_status(pool, loop.id, "running")()) or None
        assert stale is not None
        # The worker is gone as far as the fleet knows: its lease expired and the reaper
        # re-queued the turn on a new generation (what a SIGKILL leads to).
        async with transaction(pool) as conn:
            await factories.set_loop(conn, loop.id, lease_in=-1)
            (reaped,) = await loops.reap_expired(conn, dead_workers=[], limit=10)
        assert reaped["id"] == loop.id
        await fake_llm.wait_for_disconnects(1)  # the stale worker noticed and hung up
        await eventually(in_status(pool, loop.id, "completed"))
    rows, _ = await history(pool, loop.id)
    assert [m.content for m in rows if m.summary_through is not None] == ["SUMMARY-1"]
    sent = messages_of(fake_llm)
    assert sum(1 for m in sent if m[-1]["content"] == INSTRUCTION) == 2
    assert sent[-1][1]["content"].endswith("SUMMARY-1")


async def test_a_summary_from_a_stale_generation_is_never_written(pool: Pool) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running", lease_in=30)
        lost = await loops.finalize_compaction(
            conn,
            loop_id=loop.id,
            execution_token=uuid.uuid4(),
            new_token=uuid.uuid4(),
            tokens=(1, 1, 0),
            estimated=False,
        )
        assert lost is None
        won = await loops.finalize_compaction(
            conn,
            loop_id=loop.id,
            execution_token=loop.execution_token,  # type: ignore[arg-type]
            new_token=uuid.uuid4(),
            tokens=(1, 1, 0),
            estimated=True,
        )
    assert won is not None and won.status == "queued" and won.status_reason == "compacted"
    assert won.execution_token != loop.execution_token and won.tokens_estimated
    assert won.step_count == loop.step_count


async def test_agent_without_a_context_window_never_compacts(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="go", state={"llm": fake_llm.base_url}
        )
        await eventually(in_status(pool, loop.id, "completed"))
    assert not any(m[-1]["content"] == INSTRUCTION for m in messages_of(fake_llm))
    rows, _ = await history(pool, loop.id)
    assert all(m.summary_through is None for m in rows)

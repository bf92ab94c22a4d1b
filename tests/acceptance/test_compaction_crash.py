"""SIGKILL a worker while it runs a loop's compaction turn: another worker summarises again,
exactly one summary commits, and the loop finishes with every original message kept."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.registry import AgentRegistry
from agentd.store import loops, messages
from agentd.testing.agents import CompactingCalcAgent
from agentd.testing.fake_llm import FakeLLM, LastMessage, Reply, Rule, ToolCall

from ._procs import LEASE, assert_exactly_once, fleet, lifecycle_settings, poll

pytestmark = [pytest.mark.acceptance]

CONFIG = """\
[agents.compacting]
class = "agentd.testing.agents:CompactingCalcAgent"
"""


def is_compaction(last: LastMessage) -> bool:
    return last.role == "user" and last.text == CompactingCalcAgent.compaction_prompt


def after(result: str):  # type: ignore[no-untyped-def]
    return lambda last: last.role == "tool" and last.text == result


def script(fake: FakeLLM) -> None:
    # The first summary request hangs (the worker dies with it); the second answers.
    fake.add(Rule(match=is_compaction, reply=Reply(delay_before_first_byte=60), times=1))
    fake.add(Rule(match=is_compaction, reply=Reply(content="SUMMARY", usage=(600, 20))))
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2})], usage=(300, 10)),
        )
    )
    fake.add(
        Rule(
            match=after("3"),
            reply=Reply(tool_calls=[ToolCall("add", {"a": 3, "b": 4})], usage=(600, 10)),
        )
    )
    fake.add(Rule(match=after("7"), reply=Reply(content="done", usage=(100, 10))))


def compaction_requests(fake: FakeLLM) -> int:
    return sum(
        1
        for r in fake.requests
        if r.json["messages"][-1].get("content") == CompactingCalcAgent.compaction_prompt
    )


async def test_sigkill_during_compaction_summarises_again_and_commits_one_summary(
    pool: Pool, database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "compacting.toml"
    config.write_text(CONFIG)
    registry = AgentRegistry()
    registry.register("compacting", CompactingCalcAgent)
    async with FakeLLM() as fake, fleet(tmp_path, database_url) as f:
        script(fake)
        a = await f.worker("worker-a", pool, AGENTD_CONFIG=str(config))
        loop = await Lifecycle(pool, registry, lifecycle_settings()).start(
            agent="compacting", message="go", state={"llm": fake.base_url}
        )

        async def compacting() -> bool:
            return compaction_requests(fake) >= 1

        await poll(compacting, within=30, what="the compaction request sent")
        await f.worker("worker-b", pool, AGENTD_CONFIG=str(config))
        a.kill9()

        async def done() -> bool:
            async with connection(pool) as conn:
                row = await loops.get(conn, loop_id=loop.id)
            return row is not None and row.status == "completed"

        await poll(done, within=LEASE + 20, what="loop completed after the kill")
        assert await a.exited(5) == -signal.SIGKILL

    assert compaction_requests(fake) == 2  # summarised again by the surviving worker
    async with connection(pool) as conn:
        rows = await messages.list_(conn, loop_id=loop.id, include_hidden=True)
    summaries = [m for m in rows if m.summary_through is not None]
    assert [m.content for m in summaries] == ["SUMMARY"]  # exactly one committed
    originals = [(m.role, m.content) for m in rows if m.summary_through is None and not m.hidden]
    assert originals == [
        ("user", "go"),
        ("assistant", ""),
        ("tool", "3"),
        ("assistant", ""),
        ("tool", "7"),
        ("assistant", "done"),
    ]
    # After the summary, the last prompt is [system, summary, tail..., new messages].
    last = fake.requests[-1].json["messages"]
    assert any("SUMMARY" in str(m.get("content")) for m in last[:3]), last[:3]
    await assert_exactly_once(pool, [loop.id])

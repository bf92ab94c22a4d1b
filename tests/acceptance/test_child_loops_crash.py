"""Kill -9 real `agentd worker` processes around child loops (agents as tools): while the
child's turn streams, right after the child's end commits, and after the parent's call has
checkpointed the child's answer. Another worker carries both loops to the end, with one
child per call and the child's answer recorded once as the parent's tool result."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.registry import AgentRegistry
from agentd.store import loops, messages
from agentd.testing.agents import ProbeChild, ProbeLead
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

from ._procs import LEASE, Fleet, assert_exactly_once, fleet, lifecycle_settings, loop_row, poll

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(120)]

CONFIG = """\
[agents.probe_lead]
class = "agentd.testing.agents:ProbeLead"

[agents.probe_child]
class = "agentd.testing.agents:ProbeChild"
"""

TASK = "ADD 1 2"
# A stream that outlasts any worker start (~8 minutes at 4 characters per 30 ms) and never
# goes quiet for a read timeout: the test kills the child's worker mid-stream whenever the
# standby worker is up, never racing the stream's end or a timeout.
ENDLESS_TEXT = "Let me work this out carefully, one digit at a time. " * 1200


def registry() -> AgentRegistry:
    reg = AgentRegistry()
    reg.register("probe_lead", ProbeLead)
    reg.register("probe_child", ProbeChild)
    return reg


def script(fake: FakeLLM, *, child_streams_on: bool = False) -> None:
    """The lead delegates TASK to probe_child, which answers `three`; the lead then says
    what it heard. With `child_streams_on`, the child's first answer streams on and on."""
    if child_streams_on:
        endless = Reply(content=ENDLESS_TEXT, chunk_size=4, chunk_delay=0.03)
        fake.add(Rule(match=TASK, reply=endless, times=1))
    fake.add(Rule(match=TASK, reply=Reply(content="three")))
    fake.add(
        Rule(
            match=lambda m: m.role == "user" and m.text == "DELEGATE",
            reply=Reply(tool_calls=[ToolCall("agent__probe_child", {"message": TASK})]),
        )
    )
    fake.add(
        Rule(
            match=lambda m: m.role == "tool" and m.tool_name == "agent__probe_child",
            reply=lambda m: Reply(content=f"the child said {m.text}"),
        )
    )


def child_requests(fake: FakeLLM) -> int:
    return sum(1 for r in fake.requests if r.json["messages"][-1].get("content") == TASK)


async def start(pool: Pool, fake: FakeLLM, probe: Path) -> uuid.UUID:
    """The lead's loop; its child inherits its state (streaming, the probe directory)."""
    loop = await Lifecycle(pool, registry(), lifecycle_settings()).start(
        agent="probe_lead",
        message="DELEGATE",
        state={"llm": fake.base_url, "probe_dir": str(probe), "stream": True},
    )
    return loop.id


async def worker(f: Fleet, name: str, pool: Pool, config: Path) -> Any:
    return await f.worker(name, pool, AGENTD_CONFIG=str(config))


async def completed(pool: Pool, loop_id: uuid.UUID) -> bool:
    return (await loop_row(pool, loop_id))["status"] == "completed"


async def assert_one_child_answered_once(pool: Pool, parent_id: uuid.UUID) -> None:
    """One child, completed; the parent's one call linked to it and answered once with the
    child's answer; both loops exactly once (assert_exactly_once)."""
    async with connection(pool) as conn:
        kids = await loops.list_children(conn, parent_id=parent_id)
        calls = await conn.fetch("SELECT * FROM tool_calls WHERE loop_id = $1", parent_id)
        parent_msgs = await messages.list_(conn, loop_id=parent_id, include_hidden=True)
        started = await conn.fetchval(
            "SELECT count(*) FROM events WHERE loop_id = $1 AND name = 'loop.child_started'",
            parent_id,
        )
        child_loops = await conn.fetchval("SELECT count(*) FROM loops WHERE parent_id IS NOT NULL")
    (kid,) = kids
    assert kid.status == "completed" and kid.agent == "probe_child"
    (call,) = calls
    assert call["child_loop_id"] == kid.id and kid.parent_tool_call_id == call["id"]
    assert call["result"] == "three" and call["is_success"] is True
    assert [m.content for m in parent_msgs if m.role == "tool"] == ["three"]
    assert [m.content for m in parent_msgs if m.role == "assistant" and not m.hidden][-1] == (
        "the child said three"
    )
    assert started == 1 and child_loops == 1
    await assert_exactly_once(pool, [parent_id, kid.id])


async def test_sigkill_mid_child_turn_reruns_the_child_and_answers_the_parent_once(
    pool: Pool, database_url: str, tmp_path: Path
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    config = tmp_path / "children.toml"
    config.write_text(CONFIG)
    async with FakeLLM() as fake, fleet(tmp_path, database_url) as f:
        script(fake, child_streams_on=True)
        a = await worker(f, "worker-a", pool, config)
        parent = await start(pool, fake, probe)

        async def child_streaming() -> uuid.UUID | None:
            async with connection(pool) as conn:
                return await conn.fetchval(
                    "SELECT l.id FROM loops l JOIN messages m ON m.loop_id = l.id "
                    "WHERE l.parent_id = $1 AND m.status = 'processing' "
                    "AND length(m.content) > 8",
                    parent,
                )

        kid = await poll(child_streaming, within=30, what="the child's answer streaming")
        await worker(f, "worker-b", pool, config)
        assert (await loop_row(pool, kid))["worker_id"] == a.worker_id  # still on a, mid-turn
        a.kill9()

        await poll(lambda: completed(pool, parent), within=LEASE + 20, what="parent completed")
        assert await a.exited(5) == -signal.SIGKILL

    assert child_requests(fake) == 2  # the child's turn ran again, on the surviving worker
    await assert_one_child_answered_once(pool, parent)


async def test_sigkill_right_after_the_childs_end_resumes_the_parent_without_rerunning_it(
    pool: Pool, database_url: str, tmp_path: Path
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "crash_after_child_end").touch()
    config = tmp_path / "children.toml"
    config.write_text(CONFIG)
    async with FakeLLM() as fake, fleet(tmp_path, database_url) as f:
        script(fake)
        a = await worker(f, "worker-a", pool, config)
        parent = await start(pool, fake, probe)
        assert await a.exited(30) == -signal.SIGKILL  # killed itself as the child ended
        (probe / "crash_after_child_end").unlink()
        async with connection(pool) as conn:
            (kid,) = await loops.list_children(conn, parent_id=parent)
            (call,) = await conn.fetch("SELECT * FROM tool_calls WHERE loop_id = $1", parent)
            job = await conn.fetchval(
                "SELECT count(*) FROM jobs WHERE tool_call_id = $1", call["id"]
            )
        # Between the child's end and the parent's continuation: the child is done, the
        # parent's call unanswered and due to run (its job, or a lease of the dead worker).
        assert kid.status == "completed"
        assert call["response_message_id"] is None and call["executed_at"] is None
        assert job == 1 or call["lease_worker_id"] == a.worker_id, (job, dict(call))

        await worker(f, "worker-b", pool, config)
        await poll(lambda: completed(pool, parent), within=LEASE + 20, what="parent completed")

    assert child_requests(fake) == 1  # the child ran once: its end was not lost
    await assert_one_child_answered_once(pool, parent)


async def test_sigkill_after_the_parent_checkpointed_the_childs_answer_replays_it_once(
    pool: Pool, database_url: str, tmp_path: Path
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "crash_after_checkpoint").touch()  # the lead's only checkpoint: the child call
    config = tmp_path / "children.toml"
    config.write_text(CONFIG)
    async with FakeLLM() as fake, fleet(tmp_path, database_url) as f:
        script(fake)
        a = await worker(f, "worker-a", pool, config)
        parent = await start(pool, fake, probe)
        assert await a.exited(30) == -signal.SIGKILL  # killed itself after the checkpoint
        (probe / "crash_after_checkpoint").unlink()
        async with connection(pool) as conn:
            (call,) = await conn.fetch("SELECT * FROM tool_calls WHERE loop_id = $1", parent)
        assert call["executed_at"] is not None and call["result"] == "three"
        assert call["response_message_id"] is None and call["lease_worker_id"] == a.worker_id

        await worker(f, "worker-b", pool, config)
        await poll(lambda: completed(pool, parent), within=LEASE + 20, what="parent completed")

    assert child_requests(fake) == 1
    await assert_one_child_answered_once(pool, parent)

"""Continuing a completed loop with a user message is safe against a concurrent continue or
resume: exactly one wins, exactly one new LLM job exists, the other is refused."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from long_loops_kit import history, in_status

from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.errors import InvalidTransition
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.store import jobs
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM


async def finished_loop(
    pool: Pool, database_url: str, registry: AgentRegistry, fake: FakeLLM
) -> uuid.UUID:
    fake.reply(content="done")
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="hi", state={"llm": fake.base_url}
        )
        await eventually(in_status(pool, loop.id, "completed"))
    return loop.id  # type: ignore[no-any-return]


async def llm_jobs(pool: Pool, loop_id: uuid.UUID) -> list[dict[str, Any]]:
    async with connection(pool) as conn:
        return [j for j in await jobs.list_for_loop(conn, loop_id=loop_id) if j["queue"] == "llm"]


@pytest.mark.parametrize("rival", ["append", "resume"])
async def test_concurrent_continue_and_rival_enqueue_exactly_one_turn(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    settings: Settings,
    fake_llm: FakeLLM,
    rival: str,
) -> None:
    loop_id = await finished_loop(pool, database_url, registry, fake_llm)
    # Two API processes, each with its own lifecycle, racing on the same loop (no engine
    # runs, so the winner's job stays queued where the test can count it).
    a, b = Lifecycle(pool, registry, settings), Lifecycle(pool, registry, settings)
    second = (
        b.append_message(loop_id, "and another thing")
        if rival == "append"
        else b.resume(loop_id, from_=["completed"])
    )
    results = await asyncio.gather(
        a.append_message(loop_id, "one more thing"), second, return_exceptions=True
    )
    won = [r for r in results if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1 and len(lost) == 1, results
    assert isinstance(lost[0], InvalidTransition)
    assert won[0].status == "queued"
    (job,) = await llm_jobs(pool, loop_id)
    assert job["generation"] == won[0].execution_token
    rows, _ = await history(pool, loop_id)
    appended = rival == "append" or won[0] is results[0]
    assert len([m for m in rows if m.role == "user"]) == 1 + appended  # a loser writes none


async def test_continuing_a_completed_loop_runs_one_turn_with_the_whole_history(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    loop_id = await finished_loop(pool, database_url, registry, fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        await engine.lifecycle.append_message(loop_id, "thanks")
        done = await eventually(in_status(pool, loop_id, "completed"))
    assert done.step_count == 2
    last = fake_llm.requests[-1].json["messages"]
    assert [(m["role"], m["content"]) for m in last[1:]] == [
        ("user", "hi"),
        ("assistant", "done"),
        ("user", "thanks"),
    ]

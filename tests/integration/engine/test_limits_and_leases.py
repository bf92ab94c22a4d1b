"""Limits pause a loop with a clear reason; a lost lease cancels the turn and writes nothing."""

from __future__ import annotations

import asyncio
import time
import uuid

from agentd.db.pool import Pool, connection, transaction
from agentd.registry import AgentRegistry
from agentd.store import loops, messages
from agentd.store.models import Loop
from agentd.testing import factories
from agentd.testing.agents import CALLS, CalcAgent
from agentd.testing.engine import eventually, loop_row, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


class OneStepAgent(CalcAgent):
    max_steps = 1


class ShortTurnAgent(CalcAgent):
    max_duration = 0.3


async def paused(pool: Pool, loop_id: uuid.UUID) -> Loop | None:
    row = await loop_row(pool, loop_id)
    return row if row.status == "paused" else None


async def test_max_steps_pauses_the_loop_before_another_model_call(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    registry.register("one_step", OneStepAgent)
    fake_llm.reply(tool_calls=[ToolCall("add", {"a": 1, "b": 1})])  # never finishes on its own
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="one_step", message="go", state={"llm": fake_llm.base_url}
        )
        row = await eventually(lambda: paused(pool, loop.id))
    assert row.status_reason == "max_steps_exceeded"
    assert row.error_message == "max_steps (1) reached"
    assert row.step_count == 1 and row.execution_token is None
    assert len(fake_llm.requests) == 1 and len(CALLS) == 1


async def test_max_duration_pauses_a_turn_that_runs_too_long(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    registry.register("short", ShortTurnAgent)
    fake_llm.reply(content="too late", delay_before_first_byte=3)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="short", message="go", state={"llm": fake_llm.base_url, "stream": True}
        )
        row = await eventually(lambda: paused(pool, loop.id))
    assert row.status_reason == "max_duration_exceeded"
    assert row.error_message is not None and "max_duration (0.3s)" in row.error_message
    assert row.step_count == 0
    async with connection(pool) as conn:
        rows = await messages.list_(conn, loop_id=loop.id, include_hidden=True)
    assert [(m.role, m.status, m.hidden) for m in rows] == [
        ("user", "completed", False),
        ("assistant", "failed", True),  # the stream's shell never became history
    ]


async def test_rotated_token_cancels_the_turn_at_once_and_it_writes_nothing(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    slow = "x" * 1200  # streamed 4 characters every 50 ms: about fifteen seconds
    fake_llm.add(Rule(reply=Reply(content=slow, chunk_size=4, chunk_delay=0.05), times=1))
    fake_llm.add(Rule(reply=Reply(content="fresh answer")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="go", state={"llm": fake_llm.base_url, "stream": True}
        )

        async def streaming() -> bool:
            async with connection(pool) as conn:
                rows = await messages.list_(conn, loop_id=loop.id, include_hidden=True)
            return any(m.status == "processing" and m.content for m in rows)

        await eventually(streaming)
        (turn,) = engine.renewer.in_flight()[0]
        assert turn.key == loop.id and turn.task is not None
        # Another party takes the turn (here: the reaper, as if the lease had expired).
        # No NOTIFY reaches the worker, so only its heartbeat can notice.
        async with transaction(pool) as conn:
            await factories.set_loop(conn, loop.id, lease_in=-1)
            (reaped,) = await loops.reap_expired(conn, dead_workers=[], limit=10)
            rotated_at = time.monotonic()
        assert reaped["id"] == loop.id

        async def lost() -> bool:
            return turn.lost

        await eventually(lost, interval=0.01)  # its task is cancelled in the same step
        noticed = time.monotonic() - rotated_at
        assert turn.reason == "token_rotated"
        done, _ = await asyncio.wait({turn.task}, timeout=5)
        assert done  # unwound, even though this engine claimed the loop's new turn meanwhile
        await fake_llm.wait_for_disconnects(1)  # and its stream was cut
        row = await eventually(lambda: _completed(pool, loop.id))
    assert noticed < 10 * engine.settings.heartbeat_interval, noticed  # lease: 7 s
    assert row.step_count == 1
    async with connection(pool) as conn:
        rows = await messages.list_(conn, loop_id=loop.id, include_hidden=True)
    assistant = [(m.content, m.status, m.hidden) for m in rows if m.role == "assistant"]
    stale_content, stale_status, stale_hidden = assistant[0]
    assert stale_status == "failed" and stale_hidden and slow.startswith(stale_content or "")
    assert assistant[1:] == [("fresh answer", "completed", False)]
    assert len(fake_llm.requests) == 2


async def _completed(pool: Pool, loop_id: uuid.UUID) -> Loop | None:
    row = await loop_row(pool, loop_id)
    return row if row.status == "completed" else None

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.store import loops, tool_calls
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


@pytest.fixture
def captured() -> Iterator[structlog.testing.LogCapture]:
    """Every log line as the JSON renderer would see it, contextvars merged in."""
    capture = structlog.testing.LogCapture()
    saved = structlog.get_config()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, capture])
    try:
        yield capture
    finally:
        structlog.configure(**saved)


async def _completed(pool: Pool, loop_id: uuid.UUID) -> bool:
    async with connection(pool) as conn:
        loop = await loops.get(conn, loop_id=loop_id)
    return loop is not None and loop.status == "completed"


async def test_turn_and_tool_call_log_lines_carry_ids_and_trace_ids(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    spans: Any,
    captured: structlog.testing.LogCapture,
) -> None:
    fake_llm.add(Rule(match=lambda last: last.role == "user", reply=Reply(status=503), times=1))
    fake_llm.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2})]),
        )
    )
    fake_llm.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="3")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="add", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: _completed(pool, loop.id))
        await eventually(lambda: _logged(captured, "turn.done", 2))
    async with connection(pool) as conn:
        (call,) = await tool_calls.list_for_loop(conn, loop_id=loop.id)
    worker = str(engine.worker_id)

    def lines(event: str) -> list[dict[str, Any]]:
        return [e for e in captured.entries if e["event"] == event]

    first_turn, second_turn = lines("turn.claimed")
    (tool_line,) = lines("tool_call.claimed")
    (retry,) = lines("llm.retry")  # logged deep in the LLM client, yet it carries the ids
    for line in (first_turn, second_turn, tool_line, retry):
        assert line["loop_id"] == str(loop.id)
        assert line["worker"] == worker
        assert len(line["trace_id"]) == 32 and len(line["span_id"]) == 16
    for line in (first_turn, retry):
        assert isinstance(line["job_id"], int)
    # The call and the second turn ran chained: handed to this worker by the statement that
    # made them due (the first turn's finalize, the call's finish), with no job.
    for line in (tool_line, second_turn):
        assert line["chained"] is True and "job_id" not in line
    assert retry["trace_id"] == first_turn["trace_id"] and retry["step"] == 1
    assert [first_turn["step"], second_turn["step"]] == [1, 2]
    assert tool_line["tool_call_id"] == call.id and tool_line["tool"] == "add"
    # One grep for the first turn's trace id finds its tool call too (a child span).
    assert tool_line["trace_id"] == first_turn["trace_id"]
    assert tool_line["span_id"] != first_turn["span_id"]
    # Lines outside any job carry none of a job's ids.
    (started,) = lines("engine.started")
    assert "loop_id" not in started and "trace_id" not in started


async def _logged(captured: structlog.testing.LogCapture, event: str, n: int) -> bool:
    return sum(1 for e in captured.entries if e["event"] == event) >= n


async def _status(pool: Pool, loop_id: uuid.UUID) -> str:
    async with connection(pool) as conn:
        loop = await loops.get(conn, loop_id=loop_id)
    assert loop is not None
    return loop.status


async def test_every_loop_logs_its_start_and_end_at_info_with_its_loop_id(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    captured: structlog.testing.LogCapture,
) -> None:
    """docs/observability.md: follow a loop by loop_id. At `info` a healthy loop logged
    nothing, so there was nothing to follow."""
    fake_llm.add(Rule(match="finish", reply=Reply(content="done")))
    fake_llm.add(Rule(match="break", reply=Reply(status=400, error_body={"error": "bad"})))
    fake_llm.add(Rule(match="wait", reply=Reply(content="slow", delay_before_first_byte=30)))
    async with running_engine(pool, database_url, registry) as engine:
        state = {"llm": fake_llm.base_url}
        ok = await engine.lifecycle.start(agent="calc", message="finish", state=state)
        bad = await engine.lifecycle.start(agent="calc", message="break", state=state)
        slow = await engine.lifecycle.start(agent="calc", message="wait", state=state)

        async def settled() -> bool:
            return (await _status(pool, ok.id), await _status(pool, bad.id)) == (
                "completed",
                "failed",
            )

        await eventually(settled)
        await engine.lifecycle.stop(slow.id)
    want = {ok.id: "loop.completed", bad.id: "loop.failed", slow.id: "loop.stopped"}
    for loop_id, end in want.items():
        mine = [
            e["event"]
            for e in captured.entries
            if e.get("loop_id") == str(loop_id) and e["log_level"] == "info"
        ]
        assert "loop.started" in mine and end in mine, (end, mine)

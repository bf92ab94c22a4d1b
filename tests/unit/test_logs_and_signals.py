"""Module loggers follow a later structlog configuration; Signal wakes only its waiters."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
import structlog

from agentd import logs
from agentd.engine.ticks import Signal


def test_a_used_module_logger_follows_a_later_configuration() -> None:
    log = logs.get("agentd.test")
    saved = structlog.get_config()
    try:
        logs.configure("json", "warning")
        log.info("filtered out")  # builds and keeps the bound logger
        first, second = io.StringIO(), io.StringIO()
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=first))
        log.warning("one", n=1)
        logs.configure("json", "debug")
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=second))
        log.debug("two", n=2)
        assert json.loads(first.getvalue())["event"] == "one"
        assert json.loads(second.getvalue())["event"] == "two"
        assert log.bind(k="v") is not None
    finally:
        structlog.configure(**saved)


async def test_signal_wakes_each_waiter_at_its_count_and_times_out_otherwise() -> None:
    s = Signal()
    s.fire()
    await s.wait_for(1, within=0.01)  # already reached: returns at once
    two = asyncio.create_task(s.wait_for(2, within=5))
    three = asyncio.create_task(s.wait_for(3, within=5))
    await asyncio.sleep(0)
    s.fire()
    await asyncio.wait_for(two, 5)
    assert not three.done()
    s.fire()
    await asyncio.wait_for(three, 5)
    with pytest.raises(TimeoutError):
        await s.wait_for(10, within=0.01)
    assert s._waiters == []  # a timed-out waiter leaves nothing behind

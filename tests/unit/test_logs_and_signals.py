"""Module loggers follow a later structlog configuration; with json every library's log line
(stdlib logging, warnings, an uncaught exception) is JSON; Signal wakes only its waiters."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys
import warnings
from collections.abc import Iterator

import pytest
import structlog

from agentd import logs
from agentd.engine.ticks import Signal


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """logs.configure changes the process's root logger, warnings and excepthook: undo."""
    root = logging.getLogger()
    handlers, level, hook = list(root.handlers), root.level, sys.excepthook
    showwarning = warnings.showwarning
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.handlers[:] = handlers
        root.setLevel(level)
        sys.excepthook = hook
        warnings.showwarning = showwarning


def test_a_used_module_logger_follows_a_later_configuration(restored_logging: None) -> None:
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


SCRIPT = r"""
import logging, warnings
from agentd import logs

logs.configure("json", "info")
try:
    raise ConnectionResetError("connection was closed in the middle of operation")
except ConnectionResetError:
    logging.getLogger("asyncpg.pool").exception("Unhandled exception in asyncpg connection")
logging.getLogger("opentelemetry.sdk.trace.export").error(
    "Exception while exporting Span batch.",
    exc_info=ConnectionRefusedError(111, "refused: key sk-live-abcdefgh12345678"),
)
logging.getLogger("uvicorn.error").warning("Invalid HTTP request received.")
logging.getLogger("asyncio").error("Task exception was never retrieved\nsecond line")
logging.getLogger("some.library").info("library chatter below warning")
warnings.warn("a library warns", UserWarning, stacklevel=1)
logs.get("agentd.test").info("ours", loop_id="l-1")
raise ValueError("an uncaught crash\nspanning lines")
"""


def test_with_json_every_line_a_library_writes_to_stderr_is_json() -> None:
    """Caught: during a database outage 138 of 283 lines were plain text (asyncpg and
    OpenTelemetry tracebacks went through stdlib logging's own format)."""
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not JSON: {line!r}\n--- stderr:\n{proc.stderr}")
    by_event = {p["event"]: p for p in parsed}
    asyncpg = by_event["Unhandled exception in asyncpg connection"]
    assert asyncpg["logger"] == "asyncpg.pool" and asyncpg["level"] == "error"
    assert "ConnectionResetError" in asyncpg["exception"]
    assert "Traceback" in asyncpg["exception"]
    otel = by_event["Exception while exporting Span batch."]
    assert "ConnectionRefusedError" in otel["exception"]
    assert "sk-live-abcdefgh12345678" not in proc.stderr  # scrubbed like our own lines
    assert by_event["Invalid HTTP request received."]["logger"] == "uvicorn.error"
    assert "Task exception was never retrieved\nsecond line" in by_event
    assert "library chatter below warning" not in by_event  # libraries stay at warning
    assert any("a library warns" in p["event"] for p in parsed)  # warnings are captured
    assert by_event["ours"]["loop_id"] == "l-1"
    crash = by_event["process.crashed"]
    assert crash["level"] == "critical" and "an uncaught crash" in crash["exception"]
    assert all("timestamp" in p for p in parsed)

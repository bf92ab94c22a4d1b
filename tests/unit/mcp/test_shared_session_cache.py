"""The process-wide MCP session cache: one open in flight per server, whose session or
error every loop waiting for it shares; a cancelled opener hands the open over."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentd.errors import McpError
from agentd.mcp import shared_sessions
from agentd.mcp.config import McpServerConfig
from agentd.mcp.records import SessionInfo

CONFIG = McpServerConfig(name="web", url="http://tools.invalid/mcp", session="process")


class Opener:
    """An `open_new` that waits for `go` and then opens (or fails), counting its calls."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls = 0
        self.go = asyncio.Event()
        self.error = error

    async def __call__(self) -> Any:
        self.calls += 1
        n = self.calls
        await self.go.wait()
        if self.error is not None:
            raise self.error
        info = SessionInfo(f"session-{n}", {"serverInfo": {"name": "t"}}, [])
        return info, [], [f"exchange of open {n}"]


async def test_concurrent_loops_wait_for_one_open_and_share_its_session() -> None:
    opener = Opener()
    tasks = [asyncio.create_task(shared_sessions.open_shared(CONFIG, opener)) for _ in range(4)]
    await asyncio.sleep(0)  # every task is now opening or waiting
    opener.go.set()
    results = await asyncio.gather(*tasks)
    assert opener.calls == 1
    assert {info.session_id for info, _, _ in results} == {"session-1"}
    assert all(info.metadata[shared_sessions.SHARED_KEY] is True for info, _, _ in results)
    # Only the opener's result carries the exchanges: one wire log for one handshake.
    assert sorted(len(exchanges) for _, _, exchanges in results) == [0, 0, 0, 1]
    # Each loop gets its own metadata to store or amend.
    results[0][0].metadata["mine"] = 1
    assert "mine" not in results[1][0].metadata
    assert shared_sessions.current(CONFIG) == "session-1"


async def test_a_failed_open_fails_every_waiter_once_and_the_next_call_opens_again() -> None:
    opener = Opener(McpError("server down", retryable=True))
    tasks = [asyncio.create_task(shared_sessions.open_shared(CONFIG, opener)) for _ in range(4)]
    await asyncio.sleep(0)
    opener.go.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert opener.calls == 1  # the waiters did not each try in turn
    assert all(isinstance(r, McpError) and r.message == "server down" for r in results)
    assert shared_sessions.current(CONFIG) is None
    opener.error = None
    info, _, _ = await shared_sessions.open_shared(CONFIG, opener)
    assert (opener.calls, info.session_id) == (2, "session-2")


async def test_a_cancelled_opener_hands_the_open_to_a_waiter() -> None:
    opener = Opener()
    first = asyncio.create_task(shared_sessions.open_shared(CONFIG, opener))
    await asyncio.sleep(0)
    second = asyncio.create_task(shared_sessions.open_shared(CONFIG, opener))
    await asyncio.sleep(0)
    first.cancel()  # its loop was paused mid-handshake
    with pytest.raises(asyncio.CancelledError):
        await first
    opener.go.set()
    info, _, exchanges = await second
    assert opener.calls == 2 and info.session_id == "session-2" and exchanges


async def test_a_cancelled_waiter_leaves_the_open_to_the_others() -> None:
    opener = Opener()
    first = asyncio.create_task(shared_sessions.open_shared(CONFIG, opener))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(shared_sessions.open_shared(CONFIG, opener))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    opener.go.set()
    info, _, _ = await first
    assert opener.calls == 1 and info.session_id == "session-1"


async def test_a_recovered_session_replaces_the_shared_one_once() -> None:
    opener = Opener()
    opener.go.set()
    await shared_sessions.open_shared(CONFIG, opener)
    shared_sessions.replaced(CONFIG, "session-1", "session-9")
    assert shared_sessions.current(CONFIG) == "session-9"
    # A second loop that recovered the same lost id later does not undo the first's.
    shared_sessions.replaced(CONFIG, "session-1", "session-10")
    assert shared_sessions.current(CONFIG) == "session-9"
    other = McpServerConfig(name="web", url="http://other.invalid/mcp", session="process")
    assert shared_sessions.current(other) is None

"""A process's MCP session cache (`SharedSessions`): one open in flight per server, whose
session or error every loop waiting for it shares; a cancelled opener hands the open over;
"auto" shares only a session the server did not issue, and keeps listings per version."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentd.errors import McpError
from agentd.mcp import shared_sessions
from agentd.mcp.config import McpServerConfig
from agentd.mcp.records import McpTool, SessionInfo

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
    sessions = shared_sessions.SharedSessions()
    opener = Opener()
    tasks = [asyncio.create_task(sessions.open_shared(CONFIG, opener)) for _ in range(4)]
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
    assert sessions.current(CONFIG) == "session-1"


async def test_a_failed_open_fails_every_waiter_once_and_the_next_call_opens_again() -> None:
    sessions = shared_sessions.SharedSessions()
    opener = Opener(McpError("server down", retryable=True))
    tasks = [asyncio.create_task(sessions.open_shared(CONFIG, opener)) for _ in range(4)]
    await asyncio.sleep(0)
    opener.go.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert opener.calls == 1  # the waiters did not each try in turn
    assert all(isinstance(r, McpError) and r.message == "server down" for r in results)
    assert sessions.current(CONFIG) is None
    opener.error = None
    info, _, _ = await sessions.open_shared(CONFIG, opener)
    assert (opener.calls, info.session_id) == (2, "session-2")


async def test_a_cancelled_opener_hands_the_open_to_a_waiter() -> None:
    sessions = shared_sessions.SharedSessions()
    opener = Opener()
    first = asyncio.create_task(sessions.open_shared(CONFIG, opener))
    await asyncio.sleep(0)
    second = asyncio.create_task(sessions.open_shared(CONFIG, opener))
    await asyncio.sleep(0)
    first.cancel()  # its loop was paused mid-handshake
    with pytest.raises(asyncio.CancelledError):
        await first
    opener.go.set()
    info, _, exchanges = await second
    assert opener.calls == 2 and info.session_id == "session-2" and exchanges


async def test_a_cancelled_waiter_leaves_the_open_to_the_others() -> None:
    sessions = shared_sessions.SharedSessions()
    opener = Opener()
    first = asyncio.create_task(sessions.open_shared(CONFIG, opener))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(sessions.open_shared(CONFIG, opener))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    opener.go.set()
    info, _, _ = await first
    assert opener.calls == 1 and info.session_id == "session-1"


async def test_a_recovered_session_replaces_the_shared_one_once() -> None:
    sessions = shared_sessions.SharedSessions()
    opener = Opener()
    opener.go.set()
    await sessions.open_shared(CONFIG, opener)
    sessions.replaced(CONFIG, "session-1", "session-9")
    assert sessions.current(CONFIG) == "session-9"
    # A second loop that recovered the same lost id later does not undo the first's.
    sessions.replaced(CONFIG, "session-1", "session-10")
    assert sessions.current(CONFIG) == "session-9"
    other = McpServerConfig(name="web", url="http://other.invalid/mcp", session="process")
    assert sessions.current(other) is None


AUTO = McpServerConfig(name="web", url="http://tools.invalid/mcp")


def stateful(n: int, version: str = "1.0") -> SessionInfo:
    return SessionInfo(f"real-{n}", {"serverInfo": {"name": "t", "version": version}}, [])


async def test_auto_is_the_default_and_shares_a_session_the_server_did_not_issue() -> None:
    assert AUTO.session == "auto"
    sessions = shared_sessions.SharedSessions()
    opener = Opener()
    opener.go.set()

    async def stateless() -> Any:
        info, tools, exchanges = await opener()
        return SessionInfo("stateless-1", info.metadata, [], stateless=True), tools, exchanges

    first = await sessions.open_shared(AUTO, stateless, share=lambda i: i.stateless)
    second = await sessions.open_shared(AUTO, stateless, share=lambda i: i.stateless)
    assert first is not None and second is not None and opener.calls == 1
    assert second[0].metadata[shared_sessions.SHARED_KEY] is True
    assert not sessions.stateful(AUTO)


async def test_auto_keeps_an_issued_session_to_its_opener_and_the_waiters_open_their_own() -> None:
    sessions = shared_sessions.SharedSessions()
    go = asyncio.Event()
    calls = 0

    async def opener() -> Any:
        nonlocal calls
        calls += 1
        await go.wait()
        return stateful(calls), [], ["exchange"]

    tasks = [
        asyncio.create_task(sessions.open_shared(AUTO, opener, share=lambda i: i.stateless))
        for _ in range(3)
    ]
    await asyncio.sleep(0)
    go.set()
    results = await asyncio.gather(*tasks)
    assert calls == 1 and sessions.stateful(AUTO)
    mine = [r for r in results if r is not None]
    assert len(mine) == 1 and mine[0][0].session_id == "real-1"
    assert shared_sessions.SHARED_KEY not in mine[0][0].metadata  # the ender may end it
    assert sessions.current(AUTO) is None
    # Once known stateful, an open does not wait for anyone: None at once.
    assert await sessions.open_shared(AUTO, opener, share=lambda i: i.stateless) is None
    assert calls == 1


def test_a_listing_is_kept_per_server_version_until_the_tools_change() -> None:
    sessions = shared_sessions.SharedSessions()
    tool = McpTool("echo", "echo", "web", "", {"type": "object"})
    assert sessions.listing(AUTO, stateful(1)) is None
    sessions.keep_listing(AUTO, stateful(1), [tool])
    assert sessions.listing(AUTO, stateful(2)) == [tool]  # another session, same version
    assert sessions.listing(AUTO, stateful(3, version="2.0")) is None  # upgraded server
    other = McpServerConfig(name="web", url="http://tools.invalid/mcp", prefix="p")
    assert sessions.listing(other, stateful(1)) is None  # another prefix: other names
    sessions.tools_changed(AUTO)
    assert sessions.listing(AUTO, stateful(4)) is None

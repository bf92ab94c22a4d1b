"""ToolDiscovery through an MCP outage: quick retries in the turn, then deferrals with a
growing delay, and a failure only after mcp_discovery_give_up_after; permanent errors fail
the loop at once; a pause or stop during the retries is prompt and loses nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine.service import Engine
from agentd.errors import AgentdError
from agentd.mcp.config import McpServerConfig
from agentd.mcp.toolbox import open_toolbox
from agentd.pipeline.llm.tool_discovery import MCP_UNAVAILABLE, retryable
from agentd.registry import AgentRegistry
from agentd.store import events, mcp, messages
from agentd.store.models import Event, Loop
from agentd.testing import agents
from agentd.testing.engine import eventually, fast_settings, loop_row, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.fake_mcp import FakeMcpServer

# Short enough for a test, long enough that each phase is visible.
QUICK = dict(
    mcp_discovery_retries=1,
    mcp_discovery_retry_delay=0.01,
    mcp_discovery_defer_delay=0.2,
    mcp_discovery_defer_max=0.4,
)


def registry_for(*entries: dict[str, Any]) -> AgentRegistry:
    class Remote(agents.CalcAgent):
        mcps = list(entries)

    reg = AgentRegistry()
    reg.register("remote", Remote)
    return reg


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def answering_404() -> AsyncIterator[tuple[str, list[str]]]:
    """An HTTP endpoint that answers every POST 404 (a wrong URL); yields (url, methods)."""
    methods: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            body = json.loads(await reader.readexactly(length) or b"{}")
            methods.append(str(body.get("method")))
            writer.write(
                b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
                b"Content-Length: 9\r\nConnection: close\r\n\r\nNot Found"
            )
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp", methods
    finally:
        server.close()
        await server.wait_closed()


async def loop_events(pool: Pool, loop_id: Any) -> list[Event]:
    async with connection(pool) as conn:
        return await events.list_(conn, loop_id=loop_id, limit=1000)


async def deferrals(pool: Pool, loop_id: Any) -> list[Event]:
    return [
        e
        for e in await loop_events(pool, loop_id)
        if e.name == "turn.deferred" and e.reason == MCP_UNAVAILABLE
    ]


async def status_is(pool: Pool, loop_id: Any, *statuses: str) -> bool:
    return (await loop_row(pool, loop_id)).status in statuses


async def deferred_now(pool: Pool, loop_id: Any) -> bool:
    row = await loop_row(pool, loop_id)
    return (row.status, row.status_reason) == ("queued", MCP_UNAVAILABLE)


async def start(engine: Engine, fake: FakeLLM, **kw: Any) -> Loop:
    return await engine.lifecycle.start(
        agent="remote", message="hello", state={"llm": fake.base_url}, **kw
    )


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as llm:
        llm.add(Rule(reply=Reply(content="done")))
        yield llm


async def test_quick_retries_ride_out_a_blip_without_deferring(
    pool: Pool, database_url: str, fake: FakeLLM
) -> None:
    async with FakeMcpServer() as server:
        server.fail_next(4)  # two attempts' worth of 500s (each is a probe and an initialize)
        settings = fast_settings(**{**QUICK, "mcp_discovery_retries": 3})
        reg = registry_for({"name": "web", "url": server.url})
        async with running_engine(pool, database_url, reg, settings=settings) as engine:
            loop = await start(engine, fake)
            await eventually(lambda: status_is(pool, loop.id, "completed"))
        assert len(server.calls("initialize")) == 3
    assert await deferrals(pool, loop.id) == []
    assert (await loop_row(pool, loop.id)).error_message is None


async def test_a_server_down_then_up_defers_the_turn_and_the_loop_completes(
    pool: Pool, database_url: str, fake: FakeLLM
) -> None:
    server = FakeMcpServer()
    await server.start()
    await server.close()  # the port now refuses connections: a server restarting
    try:
        settings = fast_settings(**QUICK, mcp_discovery_give_up_after=60.0)
        reg = registry_for({"name": "web", "url": server.url})
        async with running_engine(pool, database_url, reg, settings=settings) as engine:
            loop = await start(engine, fake, observe=True)
            await eventually(lambda: deferrals(pool, loop.id))
            await eventually(lambda: deferred_now(pool, loop.id))  # queued, not failed
            await server.start()  # back on the same port
            await eventually(lambda: status_is(pool, loop.id, "completed", "failed"))
    finally:
        await server.close()
    row = await loop_row(pool, loop.id)
    assert (row.status, row.error_message) == ("completed", None)
    evs = await loop_events(pool, loop.id)
    assert not [e for e in evs if e.name == "loop.failed"]
    first = (await deferrals(pool, loop.id))[0]
    assert "'web'" in (first.log or "") and "could not connect" in (first.log or "")
    async with connection(pool) as conn:
        sessions = await mcp.list_sessions(conn, loop_id=loop.id)
    assert [s["mcp_name"] for s in sessions] == ["web"]
    advertised = {t["function"]["name"] for t in fake.requests[0].json["tools"]}
    assert {"echo", "add"} <= advertised


async def test_a_server_down_for_good_fails_the_loop_only_after_the_give_up_time(
    pool: Pool, database_url: str, fake: FakeLLM
) -> None:
    give_up = 1.5
    settings = fast_settings(**QUICK, mcp_discovery_give_up_after=give_up)
    url = f"http://127.0.0.1:{unused_port()}/mcp"
    reg = registry_for({"name": "web", "url": url})
    async with running_engine(pool, database_url, reg, settings=settings) as engine:
        started = time.monotonic()
        loop = await start(engine, fake)
        await eventually(lambda: deferrals(pool, loop.id))
        assert not await status_is(pool, loop.id, "failed")  # deferred, not failed
        await eventually(lambda: status_is(pool, loop.id, "failed"), within=give_up + 10)
        took = time.monotonic() - started
    row = await loop_row(pool, loop.id)
    assert row.error_message is not None
    assert "'web'" in row.error_message and "could not connect" in row.error_message
    assert f"mcp_discovery_give_up_after={give_up:g}s" in row.error_message
    evs = await loop_events(pool, loop.id)
    deferred = [e for e in evs if e.name == "turn.deferred"]
    (failed,) = [e for e in evs if e.name == "loop.failed"]
    assert len(deferred) >= 3  # a growing delay: 0.2 s, 0.4 s, 0.4 s, ... within 1.5 s
    assert all(e.reason == MCP_UNAVAILABLE and "'web'" in (e.log or "") for e in deferred)
    assert (failed.created_at - deferred[0].created_at).total_seconds() >= give_up
    assert took < give_up + 5
    assert fake.requests == []  # the model was never called without its tools


@pytest.mark.parametrize("case", ["http_401", "http_404", "missing_required_tool"])
async def test_a_permanent_error_fails_the_loop_at_once(
    pool: Pool, database_url: str, fake: FakeLLM, case: str
) -> None:
    # Retries would be slow and visible: a long first wait, a long give-up time.
    settings = fast_settings(mcp_discovery_retries=3, mcp_discovery_retry_delay=30.0)
    async with contextlib.AsyncExitStack() as stack:
        if case == "http_404":
            url, methods = await stack.enter_async_context(answering_404())
            entry: dict[str, Any] = {"name": "web", "url": url}
            expected = "HTTP 404"
        else:
            server = await stack.enter_async_context(
                FakeMcpServer(token="s3cret" if case == "http_401" else None)
            )
            entry = {"name": "web", "url": server.url}
            if case == "missing_required_tool":
                entry["required_tools"] = ["teleport"]
            expected = "HTTP 401" if case == "http_401" else "required tool(s): teleport"
        reg = registry_for(entry)
        engine = await stack.enter_async_context(
            running_engine(pool, database_url, reg, settings=settings)
        )
        loop = await start(engine, fake)
        await eventually(lambda: status_is(pool, loop.id, "failed"), within=5)
        attempts = methods if case == "http_404" else [r.method for r in server.requests]
    assert attempts.count("initialize") == 1  # no retry
    row = await loop_row(pool, loop.id)
    assert row.error_message is not None and expected in row.error_message
    assert await deferrals(pool, loop.id) == []


async def test_an_agent_whose_mcp_servers_raises_fails_at_once(
    pool: Pool, database_url: str, fake: FakeLLM
) -> None:
    class Broken(agents.CalcAgent):
        def mcp_servers(self) -> list[Any]:
            raise RuntimeError("no MCP config for this tenant")

    reg = AgentRegistry()
    reg.register("remote", Broken)
    settings = fast_settings(mcp_discovery_retries=3, mcp_discovery_retry_delay=30.0)
    async with running_engine(pool, database_url, reg, settings=settings) as engine:
        loop = await start(engine, fake)
        await eventually(lambda: status_is(pool, loop.id, "failed"), within=5)
    row = await loop_row(pool, loop.id)
    assert "no MCP config for this tenant" in (row.error_message or "")
    assert await deferrals(pool, loop.id) == []


@pytest.mark.parametrize("action", ["pause", "stop"])
async def test_pause_or_stop_during_the_retries_is_prompt_and_loses_nothing(
    pool: Pool, database_url: str, fake: FakeLLM, action: str
) -> None:
    async with FakeMcpServer() as server:
        server.fail_rate = 1.0  # every POST answers 500
        # The turn would wait 30 s before its first retry unless cancelled.
        settings = fast_settings(mcp_discovery_retries=3, mcp_discovery_retry_delay=30.0)
        reg = registry_for({"name": "web", "url": server.url})
        async with running_engine(pool, database_url, reg, settings=settings) as engine:
            loop = await start(engine, fake)
            await eventually(lambda: _true(server.calls("initialize")))
            assert engine.worker.in_flight == 1  # waiting to retry
            await getattr(engine.lifecycle, action)(loop.id)
            await eventually(lambda: _true(engine.worker.in_flight == 0), within=2)
            assert await status_is(pool, loop.id, "paused" if action == "pause" else "stopped")
            assert len(server.calls("initialize")) == 1  # the retry never happened
            assert await deferrals(pool, loop.id) == []  # the cancelled turn wrote nothing
            server.fail_rate = 0.0
            await engine.lifecycle.resume(loop.id)
            await eventually(lambda: status_is(pool, loop.id, "completed"))
    async with connection(pool) as conn:
        msgs = await messages.list_(conn, loop_id=loop.id)
    assert [(m.role, m.content) for m in msgs if not m.hidden] == [
        ("user", "hello"),
        ("assistant", "done"),
    ]


async def _true(value: object) -> bool:
    return bool(value)


async def test_failures_are_classified_by_whether_waiting_can_heal_them() -> None:
    """What the real transports raise, and whether ToolDiscovery retries it."""

    async def failure(entry: dict[str, Any]) -> AgentdError:
        with pytest.raises(AgentdError) as info:
            await open_toolbox([McpServerConfig.parse(entry)])
        return info.value

    down = f"http://127.0.0.1:{unused_port()}/mcp"
    assert retryable(await failure({"name": "a", "url": down}))
    async with FakeMcpServer() as server:
        server.fail_next(2)  # the era probe and the initialize: HTTP 500
        assert retryable(await failure({"name": "a", "url": server.url}))
        server.garbage_next(2)  # 200 with an HTML body
        assert retryable(await failure({"name": "a", "url": server.url}))
        server.drop_next(1)  # the probe's connection closes without an answer
        assert retryable(await failure({"name": "a", "url": server.url}))
        entry = {"name": "a", "url": server.url, "required_tools": ["teleport"]}
        assert not retryable(await failure(entry))
        clash = [{"name": "a", "url": server.url}, {"name": "b", "url": server.url}]
        with pytest.raises(AgentdError) as info:
            await open_toolbox([McpServerConfig.parse(e) for e in clash])
        assert not retryable(info.value)
    async with FakeMcpServer(token="s3cret") as server:
        assert not retryable(await failure({"name": "a", "url": server.url}))
    async with answering_404() as (url, _):
        assert not retryable(await failure({"name": "a", "url": url}))
    missing = {"name": "a", "command": ["/nonexistent/mcp-server"]}
    assert not retryable(await failure(missing))
    crashing = {"name": "a", "command": [sys.executable, "-c", "import sys; sys.exit(3)"]}
    assert retryable(await failure(crashing))
    with pytest.raises(AgentdError) as info:
        McpServerConfig.parse({"name": "a"})
    assert not retryable(info.value)

"""`session = "auto"` (the default) against official-SDK servers of the handshake era: a
server that issues no session id is shared by every loop of the process (one initialize),
one that issues session ids gets a session per loop whose tools come from the listing
cached per server version, and `notifications/tools/list_changed` drops that listing."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp_peer_process import PeerProcess

from agentd.db.pool import Pool, connection
from agentd.mcp import shared_sessions
from agentd.registry import AgentRegistry
from agentd.store import events, loops, mcp
from agentd.testing import agents
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall
from agentd.testing.fake_mcp import FakeMcpServer

pytestmark = pytest.mark.slow  # each test starts an SDK server process (~6 s here)

SERVER = Path(__file__).parent / "peers" / "sdk_session_server.py"


@pytest.fixture(params=["stateful", "stateless"])
async def peer(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, PeerProcess]]:
    kind = str(request.param)
    process = PeerProcess(sys.executable, SERVER, *(["--stateless"] if kind == "stateless" else []))
    await process.start()
    try:
        yield kind, process
    finally:
        await process.stop()


def asked(word: str) -> Any:
    """A rule for the user's message only (a tool result may contain the word too)."""
    return lambda last: last.role == "user" and word in last.text


def registry_for(url: str) -> AgentRegistry:
    class Auto(agents.CalcAgent):
        mcps = [{"name": "sdk", "url": url, "timeout": 15}]  # session unset: "auto"

    registry = AgentRegistry()
    registry.register("auto", Auto)
    return registry


async def run(engine: Any, pool: Pool, llm: FakeLLM, message: str, n: int) -> list[Any]:
    ids = [
        (
            await engine.lifecycle.start(agent="auto", message=message, state={"llm": llm.base_url})
        ).id
        for _ in range(n)
    ]

    async def done() -> bool:
        async with connection(pool) as conn:
            rows = [await loops.get(conn, loop_id=i) for i in ids]
        return all(r is not None and r.status == "completed" for r in rows)

    await eventually(done, within=30)
    return ids


async def logged(pool: Pool, ids: list[Any], name: str) -> int:
    count = 0
    async with connection(pool) as conn:
        for i in ids:
            names = [e.name for e in await events.list_(conn, loop_id=i, after_id=0, limit=200)]
            count += names.count(name)
    return count


async def sessions_of(pool: Pool, ids: list[Any]) -> list[dict[str, Any]]:
    async with connection(pool) as conn:
        return [s for i in ids for s in await mcp.list_sessions(conn, loop_id=i)]


async def test_auto_shares_a_server_without_sessions_and_not_one_with(
    peer: tuple[str, PeerProcess], pool: Pool, database_url: str
) -> None:
    kind, process = peer
    async with FakeLLM() as llm:
        llm.add(
            Rule(match=asked("add"), reply=Reply(tool_calls=[ToolCall("add", {"a": 2, "b": 3})]))
        )
        llm.add(Rule(reply=Reply(content="done")))
        async with running_engine(pool, database_url, registry_for(process.url)) as engine:
            ids = await run(engine, pool, llm, "add", 2)
            ids += await run(engine, pool, llm, "add", 1)
    rows = await sessions_of(pool, ids)
    shared = [bool(s["metadata"].get(shared_sessions.SHARED_KEY)) for s in rows]
    assert await logged(pool, ids, "mcp.tools/list") == 1  # listed once for three loops
    if kind == "stateless":
        assert await logged(pool, ids, "mcp.initialize") == 1
        assert shared == [True] * 3 and len({s["session_id"] for s in rows}) == 1
    else:  # each loop its own session: the server may keep state per session
        assert await logged(pool, ids, "mcp.initialize") == 3
        assert shared == [False] * 3 and len({s["session_id"] for s in rows}) == 3
        assert not any(s["session_id"].startswith("stateless-") for s in rows)


async def test_tools_list_changed_makes_the_next_loop_list_again(
    peer: tuple[str, PeerProcess], pool: Pool, database_url: str
) -> None:
    _kind, process = peer
    async with FakeLLM() as llm:
        llm.add(Rule(match=asked("grow"), reply=Reply(tool_calls=[ToolCall("grow", {})])))
        llm.add(
            Rule(match=asked("add"), reply=Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 1})]))
        )
        llm.add(Rule(reply=Reply(content="done")))
        async with running_engine(pool, database_url, registry_for(process.url)) as engine:
            first = await run(engine, pool, llm, "grow", 1)
            offered_before = [t["function"]["name"] for t in llm.requests[0].json["tools"]]
            later = await run(engine, pool, llm, "add", 1)
            offered_after = [t["function"]["name"] for t in llm.requests[-1].json["tools"]]
            again = await run(engine, pool, llm, "add", 1)
    assert "shout" not in offered_before and "shout" in offered_after
    assert await logged(pool, first + later, "mcp.tools/list") == 2
    assert await logged(pool, again, "mcp.tools/list") == 0  # the new listing is cached


async def test_the_fakes_stateless_mode_is_shared_by_auto(pool: Pool, database_url: str) -> None:
    # agentd's own fake with --stateless (what bench B11's `--mcp fake-stateless` serves):
    # it issues no session id, so `auto` shares one for every loop of the process.
    async with FakeMcpServer(stateless=True) as server, FakeLLM() as llm:
        llm.add(
            Rule(match=asked("add"), reply=Reply(tool_calls=[ToolCall("add", {"a": 2, "b": 3})]))
        )
        llm.add(Rule(reply=Reply(content="done")))
        async with running_engine(pool, database_url, registry_for(server.url)) as engine:
            ids = await run(engine, pool, llm, "add", 3)
    methods = [r.method for r in server.requests]
    # one handshake (the probe era's server/discover) and one listing for three loops
    assert methods.count("server/discover") + methods.count("initialize") == 1
    assert methods.count("tools/list") == 1 and methods.count("tools/call") == 3
    assert all(r.session_id is None for r in server.requests)
    assert not server.sessions
    rows = await sessions_of(pool, ids)
    assert [bool(s["metadata"].get(shared_sessions.SHARED_KEY)) for s in rows] == [True] * 3

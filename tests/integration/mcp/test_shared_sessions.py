"""`session = "process"`: one MCP session and one tool listing per worker process serve
every loop; a lost session is recovered once for all of them; the ender never ends it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine.mcp_session_ender import McpSessionEnder
from agentd.pipeline import stacks
from agentd.pipeline.llm import tool_discovery
from agentd.pipeline.llm.response_parsing import ResponseParsing
from agentd.pipeline.stacks import default_llm_builder
from agentd.pipeline.tool import response_creation
from agentd.registry import AgentRegistry
from agentd.store import events, loops, mcp, tool_calls
from agentd.testing import agents
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall
from agentd.testing.fake_mcp import FakeMcpServer


def _script(fake: FakeLLM, *texts: str) -> None:
    """The first answer calls `web__echo` once per text (default: "hi"), then "done"."""
    calls = [ToolCall("web__echo", {"text": t}) for t in texts or ("hi",)]
    fake.add(Rule(match=lambda last: last.role == "user", reply=Reply(tool_calls=calls)))
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="done")))


def _registry(url: str, **shared: Any) -> AgentRegistry:
    class Web(agents.CalcAgent):
        mcps = [{"name": "web", "url": url, "prefix": "web", "session": "process", **shared}]

    registry = AgentRegistry()
    registry.register("web", Web)
    return registry


async def _all_completed(pool: Pool, ids: list[Any]) -> bool:
    async with connection(pool) as conn:
        rows = [await loops.get(conn, loop_id=i) for i in ids]
    return all(r is not None and r.status == "completed" for r in rows)


async def _session_row(pool: Pool, loop_id: Any) -> dict[str, Any]:
    async with connection(pool) as conn:
        (row,) = await mcp.list_sessions(conn, loop_id=loop_id)
    return row


async def _results(pool: Pool, loop_id: Any) -> list[tuple[bool | None, str | None]]:
    async with connection(pool) as conn:
        return [
            (c.is_success, c.result) for c in await tool_calls.list_for_loop(conn, loop_id=loop_id)
        ]


async def _run(engine: Any, pool: Pool, fake: FakeLLM, n: int) -> list[Any]:
    started = await asyncio.gather(
        *(
            engine.lifecycle.start(agent="web", message="go", state={"llm": fake.base_url})
            for _ in range(n)
        )
    )
    ids = [loop.id for loop in started]
    await eventually(lambda: _all_completed(pool, ids))
    return ids


async def test_loops_share_one_session_and_listing_and_the_ender_leaves_it(
    pool: Pool, database_url: str
) -> None:
    async with FakeLLM() as fake, FakeMcpServer() as server:
        _script(fake)
        registry = _registry(server.url)
        async with running_engine(pool, database_url, registry) as engine:
            ids = await _run(engine, pool, fake, 4)  # started together: one opens, three wait
            rows = [await _session_row(pool, i) for i in ids]
            assert len(server.calls("initialize")) == 1
            assert len(server.calls("tools/list")) == 1
            (shared,) = {r["session_id"] for r in rows}
            assert shared in server.sessions
            assert all(r["metadata"]["shared"] is True for r in rows)
            for i in ids:
                assert await _results(pool, i) == [(True, "hi")]
            # Only the loop that opened the session logged the handshake.
            async with connection(pool) as conn:
                logged = [
                    [e.name for e in await events.list_(conn, loop_id=i, after_id=0, limit=100)]
                    for i in ids
                ]
            assert sum(names.count("mcp.initialize") for names in logged) == 1

            # Finished loops' shared session is not ended: other loops of the worker use it.
            ender = McpSessionEnder(fast_settings(mcp_session_end_grace=0.0), pool, registry)
            assert (await ender.end_once()).claimed == 0
            assert not [r for r in server.requests if r.http_method == "DELETE"]

            # The server forgets it: the next call recovers it once, for every later loop.
            server.expire_sessions()
            (first,) = await _run(engine, pool, fake, 1)
            assert len(server.calls("initialize")) == 2
            recovered = (await _session_row(pool, first))["session_id"]
            assert recovered != shared and recovered in server.sessions
            later = await _run(engine, pool, fake, 2)
            assert len(server.calls("initialize")) == 2  # no 404 round trip per loop
            for i in [first, *later]:
                assert await _results(pool, i) == [(True, "hi")]
            calls_after = server.calls()[-2:]
            assert {c.session_id for c in calls_after} == {recovered}


async def test_a_shared_session_older_than_its_ttl_is_opened_again(
    pool: Pool, database_url: str
) -> None:
    async with FakeLLM() as fake, FakeMcpServer() as server:
        _script(fake)
        registry = _registry(server.url, session_ttl=0.001)
        async with running_engine(pool, database_url, registry) as engine:
            (a,) = await _run(engine, pool, fake, 1)
            (b,) = await _run(engine, pool, fake, 1)
            assert len(server.calls("initialize")) == 2
            assert len(server.calls("tools/list")) == 2
            sa, sb = (
                (await _session_row(pool, a))["session_id"],
                (await _session_row(pool, b))["session_id"],
            )
            assert sa != sb
            assert await _results(pool, b) == [(True, "hi")]


async def test_the_turns_finalize_records_a_shared_discovery_no_statement_of_its_own(
    pool: Pool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded: list[Any] = []
    real = mcp.record_discovery

    async def spying(conn: Any, **kw: Any) -> Any:
        recorded.append(kw["loop_id"])
        return await real(conn, **kw)

    monkeypatch.setattr(tool_discovery.mcp, "record_discovery", spying)
    async with FakeLLM() as fake, FakeMcpServer() as server:
        _script(fake, "a", "b")
        registry = _registry(server.url)
        # One tool slot: the second call goes through the queue to a claim, which must find
        # its tool among the rows the finalize wrote with the call.
        settings = fast_settings(tool_concurrency=1)
        async with running_engine(pool, database_url, registry, settings=settings) as engine:
            ids = await _run(engine, pool, fake, 2)
    assert recorded == []
    for i in ids:
        assert sorted(await _results(pool, i)) == [(True, "a"), (True, "b")]
        row = await _session_row(pool, i)
        assert row["metadata"]["shared"] is True and row["session_id"] in server.sessions
        async with connection(pool) as conn:
            tools = await mcp.list_tools(conn, loop_id=i)
        assert "web__echo" in [t.name for t in tools]
        assert {(t.mcp_name, t.session_id) for t in tools} == {("web", row["session_id"])}
    assert len(server.calls("initialize")) == 1 and len(server.calls("tools/list")) == 1


async def test_a_turn_deferred_after_a_shared_discovery_leaves_it_to_the_next(
    pool: Pool, database_url: str
) -> None:
    async with FakeLLM() as fake, FakeMcpServer() as server:
        fake.add(Rule(reply=Reply(status=429, retry_after=0.05), times=1))
        _script(fake)
        registry = _registry(server.url)
        async with running_engine(pool, database_url, registry) as engine:
            (loop_id,) = await _run(engine, pool, fake, 1)
        async with connection(pool) as conn:
            names = [e.name for e in await events.list_(conn, loop_id=loop_id, after_id=0)]
            tools = await mcp.list_tools(conn, loop_id=loop_id)
    assert "turn.deferred" in names  # the first attempt ended without its finalize
    assert names.count("mcp.initialize") == 1  # its handshake was still logged, once
    assert "web__echo" in [t.name for t in tools]  # recorded by the attempt that finished
    assert await _results(pool, loop_id) == [(True, "hi")]
    assert len(server.calls("initialize")) == 1  # the second attempt asked no server


def test_only_a_stack_that_finalizes_with_response_parsing_defers_the_record() -> None:
    stock = stacks.build(default_llm_builder())
    custom = default_llm_builder()
    custom.replace(ResponseParsing, NotResponseParsing)

    def discovery(app: Any) -> tool_discovery.ToolDiscovery:
        while not isinstance(app, tool_discovery.ToolDiscovery):
            app = app.app
        return app

    assert discovery(stock).defers_record
    assert not discovery(stacks.build(custom)).defers_record


class NotResponseParsing:
    """A finalizer of the host's own: it knows nothing of ctx.unrecorded."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, ctx: Any) -> None:
        await self.app(ctx)


async def test_a_chained_turn_reads_no_tools_it_holds_and_still_offers_them(
    pool: Pool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[bool] = []
    real = response_creation.tool_calls.finish_document

    def spying(**kw: Any) -> Any:
        if kw.get("chain_after") is not None:
            asked.append(kw["chain_tools"])
        return real(**kw)

    monkeypatch.setattr(response_creation.tool_calls, "finish_document", spying)
    async with FakeLLM() as fake, FakeMcpServer() as server:
        _script(fake)
        registry = _registry(server.url)
        async with running_engine(pool, database_url, registry) as engine:
            (loop_id,) = await _run(engine, pool, fake, 1)
    assert asked == [False]  # the one chained turn's read left the tools out
    second = fake.requests[-1].json
    assert "web__echo" in [t["function"]["name"] for t in second["tools"]]
    assert await _results(pool, loop_id) == [(True, "hi")]

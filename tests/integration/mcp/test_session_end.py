"""Finished loops' HTTP MCP sessions are ended with DELETE by the maintenance sweep
(McpSessionEnder), at most once; a continued loop opens a new session cleanly."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import structlog

from agentd.db.pool import Pool, connection
from agentd.engine.mcp_session_ender import McpSessionEnder
from agentd.registry import AgentRegistry
from agentd.store import loops, mcp, messages, tool_calls
from agentd.testing import agents
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.engine import loop_row as _loop
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall
from agentd.testing.fake_mcp import FakeMcpServer


def _script(fake: FakeLLM) -> None:
    """Every user message gets one echo over HTTP; every tool result gets a final answer."""
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[ToolCall("web__echo", {"text": "hi"})]),
        )
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="done")))


def _registry(url: str) -> AgentRegistry:
    class Web(agents.CalcAgent):
        mcps = [
            {"name": "web", "url": url, "prefix": "web"},
            {"name": "calc", "toolset": agents.calc},  # in-process: never ended
        ]

    registry = AgentRegistry()
    registry.register("web", Web)
    return registry


async def _completed(pool: Pool, loop_id: Any, steps: int = 0) -> bool:
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop_id)
    return row is not None and row.status == "completed" and row.step_count > steps


async def _sessions(pool: Pool, loop_id: Any) -> dict[str, dict[str, Any]]:
    async with connection(pool) as conn:
        return {s["mcp_name"]: s for s in await mcp.list_sessions(conn, loop_id=loop_id)}


def _ender(pool: Pool, registry: AgentRegistry, http: Any = None, grace: float = 0.0) -> Any:
    return McpSessionEnder(fast_settings(mcp_session_end_grace=grace), pool, registry, http=http)


def _deletes(server: FakeMcpServer) -> list[str | None]:
    return [r.session_id for r in server.requests if r.http_method == "DELETE"]


async def test_a_completed_loop_s_session_is_deleted_once_and_a_continue_reopens_it(
    pool: Pool, database_url: str
) -> None:
    async with FakeLLM() as fake, FakeMcpServer() as server:
        _script(fake)
        registry = _registry(server.url)
        # The engine's own sweep waits out the default grace: only ours runs in this test.
        async with running_engine(pool, database_url, registry) as engine:
            loop = await engine.lifecycle.start(
                agent="web", message="go", state={"llm": fake.base_url}
            )
            await eventually(lambda: _completed(pool, loop.id))
            before = await _sessions(pool, loop.id)
            old = before["web"]["session_id"]
            assert old in server.sessions
            local = before["calc"]["session_id"]

            # Within the grace nothing is ended.
            assert (await _ender(pool, registry, grace=3600).end_once()).claimed == 0
            assert _deletes(server) == []

            report = await _ender(pool, registry).end_once()
            assert (report.claimed, report.ended, report.not_ended) == (1, 1, 0)
            assert _deletes(server) == [old]
            assert old not in server.sessions
            after = await _sessions(pool, loop.id)
            assert after["web"]["session_id"] is None
            assert after["calc"]["session_id"] == local  # in-process: untouched
            # Idempotent: a second sweep (or another worker's) sends nothing.
            assert (await _ender(pool, registry).end_once()).claimed == 0
            assert len(_deletes(server)) == 1

            # The loop continues: its tool call opens a new session and works.
            steps = (await _loop(pool, loop.id)).step_count
            await engine.lifecycle.append_message(loop.id, "again")
            await eventually(lambda: _completed(pool, loop.id, steps))
        new = (await _sessions(pool, loop.id))["web"]["session_id"]
        assert new and new != old and new in server.sessions
        assert len(server.calls("initialize")) == 2
        # No request ever carried the ended id after its DELETE (no 404 round trip).
        ended_at = next(i for i, r in enumerate(server.requests) if r.http_method == "DELETE")
        assert all(r.session_id != old for r in server.requests[ended_at + 1 :])
        async with connection(pool) as conn:
            calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
            msgs = await messages.list_(conn, loop_id=loop.id)
        assert [(c.is_success, c.result) for c in calls] == [(True, "hi"), (True, "hi")]
        assert [m.content for m in msgs if m.role == "tool"] == ["hi", "hi"]


async def test_a_failing_delete_is_logged_never_retried_and_fails_nothing(
    pool: Pool, database_url: str
) -> None:
    async with FakeLLM() as fake, FakeMcpServer() as server:
        _script(fake)
        registry = _registry(server.url)
        async with running_engine(pool, database_url, registry) as engine:
            down = await engine.lifecycle.start(
                agent="web", message="go", state={"llm": fake.base_url}
            )
            broken = await engine.lifecycle.start(
                agent="web", message="go", state={"llm": fake.base_url}
            )
            await eventually(lambda: _completed(pool, down.id))
            await eventually(lambda: _completed(pool, broken.id))
    # The server answers 500 to everything for `broken`'s sweep...
    answered: list[httpx.Request] = []

    def five_hundred(request: httpx.Request) -> httpx.Response:
        answered.append(request)
        return httpx.Response(500, text="Internal Server Error")

    async with httpx.AsyncClient(transport=httpx.MockTransport(five_hundred)) as http:
        with structlog.testing.capture_logs() as logs:
            report = await _ender(pool, registry, http=http).end_once()
    assert (report.claimed, report.ended, report.not_ended) == (2, 0, 2)
    assert [r.method for r in answered] == ["DELETE", "DELETE"]
    assert sum(e["event"] == "mcp.session_end_unconfirmed" for e in logs) == 2

    # ...and is gone altogether for the next one: nothing left to claim, nothing retried.
    for loop_id in (down.id, broken.id):
        assert (await _sessions(pool, loop_id))["web"]["session_id"] is None
        assert (await _loop(pool, loop_id)).status == "completed"
    with structlog.testing.capture_logs() as logs:
        assert (await _ender(pool, registry).end_once()).claimed == 0
    assert logs == []


async def test_a_server_that_is_down_is_logged_and_forgotten(pool: Pool, database_url: str) -> None:
    async with FakeLLM() as fake:
        server = FakeMcpServer()
        await server.start()
        _script(fake)
        registry = _registry(server.url)
        async with running_engine(pool, database_url, registry) as engine:
            loop = await engine.lifecycle.start(
                agent="web", message="go", state={"llm": fake.base_url}
            )
            await eventually(lambda: _completed(pool, loop.id))
        await server.close()
        with structlog.testing.capture_logs() as logs:
            report = await _ender(pool, registry).end_once()
    assert (report.claimed, report.ended, report.not_ended) == (1, 0, 1)
    events = [e["event"] for e in logs]
    assert "mcp_client.terminate_failed" in events and "mcp.session_end_unconfirmed" in events
    assert (await _sessions(pool, loop.id))["web"]["session_id"] is None
    assert (await _loop(pool, loop.id)).status == "completed"
    assert (await _ender(pool, registry).end_once()).claimed == 0


async def test_one_of_two_sweeps_ends_a_session_and_stdio_in_process_stateless_are_skipped(
    pool: Pool, database_url: str
) -> None:
    async with FakeLLM() as fake, FakeMcpServer() as server:
        _script(fake)
        registry = _registry(server.url)
        async with running_engine(pool, database_url, registry) as engine:
            loop = await engine.lifecycle.start(
                agent="web", message="go", state={"llm": fake.base_url}
            )
            await eventually(lambda: _completed(pool, loop.id))
        async with connection(pool) as conn:
            # What a stdio server and a stateless (2026-07-28) HTTP server leave stored.
            for name, sid, kind in (("pipe", "proc-1", "stdio"), ("new", "stateless-ab", "http")):
                await mcp.upsert_session(
                    conn, loop_id=loop.id, mcp_name=name, session_id=sid, transport_kind=kind,
                    metadata={},
                )  # fmt: skip
        # Two workers sweep at once: the real HTTP session is claimed, and ended, once.
        reports = await asyncio.gather(*(_ender(pool, registry).end_once() for _ in range(2)))
        assert sum(r.claimed for r in reports) == 1 and sum(r.ended for r in reports) == 1
        stored = {k: v["session_id"] for k, v in (await _sessions(pool, loop.id)).items()}
        assert stored["web"] is None
        assert stored["pipe"] == "proc-1" and stored["new"] == "stateless-ab"
        assert stored["calc"] is not None
        assert len(_deletes(server)) == 1


async def test_a_loop_not_yet_finished_keeps_its_session(pool: Pool, database_url: str) -> None:
    async with FakeMcpServer() as server:
        registry = _registry(server.url)
        async with connection(pool) as conn:
            loop = await loops.insert(
                conn, agent="web", subject=None, state={}, execution_token=uuid.uuid4()
            )
            await mcp.upsert_session(
                conn, loop_id=loop.id, mcp_name="web", session_id="live", transport_kind="http",
                metadata={},
            )  # fmt: skip
        assert (await _ender(pool, registry).end_once()).claimed == 0
        assert (await _sessions(pool, loop.id))["web"]["session_id"] == "live"
        assert _deletes(server) == []


async def test_the_engine_s_maintenance_sweep_sends_the_delete(
    pool: Pool, database_url: str
) -> None:
    async with FakeLLM() as fake, FakeMcpServer() as server:
        _script(fake)
        registry = _registry(server.url)
        settings = fast_settings(mcp_session_end_grace=0.0)  # swept every reaper_interval
        async with running_engine(pool, database_url, registry, settings=settings) as engine:
            loop = await engine.lifecycle.start(
                agent="web", message="go", state={"llm": fake.base_url}
            )
            await eventually(lambda: _completed(pool, loop.id))
            (old,) = [r.session_id for r in server.calls("tools/call")]

            async def deleted() -> bool:
                return _deletes(server) == [old]

            await eventually(deleted)
            assert (await _sessions(pool, loop.id))["web"]["session_id"] is None

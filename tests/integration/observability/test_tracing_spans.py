from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.mcp.toolset import Toolset
from agentd.observability import tracing
from agentd.registry import AgentRegistry
from agentd.store import loops, tool_calls
from agentd.testing.agents import CalcAgent, calc
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall
from agentd.testing.fake_mcp import FakeMcpServer

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


class RemoteAgent(CalcAgent):
    """CalcAgent whose tools come from an HTTP MCP server named in the loop's state."""

    def mcp_servers(self) -> list[Any]:
        return [{"name": "remote", "url": self.state["mcp"]}]


def script(fake: FakeLLM, call: ToolCall) -> None:
    fake.add(
        Rule(match=lambda last: last.role == "user", reply=Reply(tool_calls=[call], usage=(30, 7)))
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="ok", usage=(40, 1))))


async def _completed(pool: Pool, loop_id: uuid.UUID) -> bool:
    async with connection(pool) as conn:
        loop = await loops.get(conn, loop_id=loop_id)
    return loop is not None and loop.status == "completed"


def _hex(span_id: int, width: int = 16) -> str:
    return format(span_id, f"0{width}x")


async def test_turn_and_tool_call_spans_follow_the_genai_conventions(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM, spans: Any
) -> None:
    script(fake_llm, ToolCall("add", {"a": 1, "b": 2}, id="call_add_1"))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="add", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: _completed(pool, loop.id))
        await eventually(lambda: _finished(spans, "chat fake-model", 2))
    async with connection(pool) as conn:
        (call,) = await tool_calls.list_for_loop(conn, loop_id=loop.id)

    first, second = sorted(_named(spans, "chat fake-model"), key=lambda s: s.start_time)
    (tool,) = _named(spans, "execute_tool add")
    assert _has(
        first,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "fake-model",
            "gen_ai.provider.name": "openai",
            "gen_ai.agent.name": "calc",
            "gen_ai.conversation.id": str(loop.id),
            "gen_ai.usage.input_tokens": 30,
            "gen_ai.usage.output_tokens": 7,
            "agentd.outcome": "tool_calls",
            "agentd.step": 1,
        },
    )
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert second.attributes["agentd.outcome"] == "completed"
    assert second.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert _has(
        tool,
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "add",
            "gen_ai.tool.call.id": "call_add_1",
            "agentd.tool_call_id": call.id,
            "agentd.outcome": "completed",
        },
    )
    # turn -> tool call, across jobs: the tool span's parent is the turn that asked for it.
    assert tool.context.trace_id == first.context.trace_id
    assert tool.parent is not None and tool.parent.span_id == first.context.span_id
    assert call.metadata["traceparent"].split("-")[2] == _hex(first.context.span_id)


async def test_http_mcp_servers_receive_the_calls_traceparent(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM, spans: Any
) -> None:
    registry.register("remote", RemoteAgent)
    script(fake_llm, ToolCall("echo", {"text": "hi"}))
    async with FakeMcpServer() as server, running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="remote", message="echo", state={"llm": fake_llm.base_url, "mcp": server.url}
        )
        await eventually(lambda: _completed(pool, loop.id))
        await eventually(lambda: _finished(spans, "chat fake-model", 2))

    (tool,) = _named(spans, "execute_tool echo")
    (mcp_call,) = _named(spans, "tools/call echo")
    assert mcp_call.kind.name == "CLIENT"
    assert mcp_call.parent is not None and mcp_call.parent.span_id == tool.context.span_id
    assert _has(
        mcp_call,
        {
            "mcp.method.name": "tools/call",
            "gen_ai.tool.name": "echo",
            "agentd.mcp.server": "remote",
            "agentd.mcp.transport": "http",
        },
    )
    (request,) = server.calls("tools/call")
    match = TRACEPARENT.match(request.headers["traceparent"])
    assert match is not None, request.headers["traceparent"]
    assert match.group(1) == _hex(tool.context.trace_id, 32)
    assert match.group(2) == _hex(mcp_call.context.span_id)
    # Discovery ran inside the first turn, so its requests carry that turn's trace.
    first = min(_named(spans, "chat fake-model"), key=lambda s: s.start_time)
    (init,) = server.calls("initialize")
    assert init.headers["traceparent"].split("-")[1] == _hex(first.context.trace_id, 32)


async def test_without_the_extra_spans_are_noops_and_loops_still_run(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tracing, "trace", None)
    monkeypatch.setattr(tracing, "propagate", None)
    with tracing.span("x", attributes={"a": 1}) as s:
        assert s is tracing.NO_SPAN and not s.is_recording()
        headers: dict[str, str] = {}
        tracing.inject(headers)
        assert headers == {} and tracing.carrier() == {} and tracing.current_ids() == {}
    script(fake_llm, ToolCall("add", {"a": 1, "b": 2}))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="add", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: _completed(pool, loop.id))
    async with connection(pool) as conn:
        (call,) = await tool_calls.list_for_loop(conn, loop_id=loop.id)
    assert "traceparent" not in call.metadata


def test_setup_from_env_is_off_unless_an_exporter_or_endpoint_is_named(
    monkeypatch: pytest.MonkeyPatch, _tracer_provider: Any
) -> None:
    from opentelemetry import trace

    installed: list[Any] = []
    monkeypatch.setattr(trace, "set_tracer_provider", installed.append)
    assert tracing.setup_from_env({}) is False
    assert tracing.setup_from_env({"OTEL_TRACES_EXPORTER": "none"}) is False
    assert tracing.setup_from_env({"OTEL_TRACES_EXPORTER": "console"}) is True
    (provider,) = installed
    assert provider.resource.attributes["service.name"] == "agentd"
    provider.shutdown()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert tracing._exporter_names(env) == ["otlp_proto_grpc"]
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
    assert tracing._exporter_names(env) == ["otlp_proto_http"]


def _has(span: Any, attributes: dict[str, Any]) -> bool:
    return attributes.items() <= dict(span.attributes).items()


def _named(spans: Any, name: str) -> list[Any]:
    return [s for s in spans.get_finished_spans() if s.name == name]


async def _finished(spans: Any, name: str, n: int) -> bool:
    return len(_named(spans, name)) >= n


boom = Toolset("boom")


@boom.tool(description="Always fails")
async def explode(reason: str) -> str:
    raise ValueError(f"exploded: {reason}")


class BoomAgent(CalcAgent):
    mcps = [{"name": "calc", "toolset": calc}, {"name": "boom", "toolset": boom}]


def _mcp_spans(spans: Any) -> list[Any]:
    return [s for s in spans.get_finished_spans() if "mcp.method.name" in (s.attributes or {})]


async def test_every_mcp_span_names_its_session_and_errors_name_their_type(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM, spans: Any
) -> None:
    """Caught: `mcp.session.id` was on no MCP span (in-process and stateless servers have
    no wire session, and initialize has none yet), and a failed tool call's span said
    `error.type="error"`."""
    registry.register("boom", BoomAgent)
    fake_llm.add(Rule(match="doomed", reply=Reply(status=400, error_body={"error": "no"})))
    script(fake_llm, ToolCall("explode", {"reason": "test"}))
    async with FakeMcpServer() as server, running_engine(pool, database_url, registry) as engine:
        registry.register("remote", RemoteAgent)
        loop = await engine.lifecycle.start(
            agent="boom", message="explode", state={"llm": fake_llm.base_url}
        )
        remote = await engine.lifecycle.start(
            agent="remote", message="explode", state={"llm": fake_llm.base_url, "mcp": server.url}
        )
        doomed = await engine.lifecycle.start(
            agent="calc", message="doomed", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: _completed(pool, loop.id))
        await eventually(lambda: _completed(pool, remote.id))

        async def failed() -> bool:
            async with connection(pool) as conn:
                row = await loops.get(conn, loop_id=doomed.id)
            return row is not None and row.status == "failed"

        await eventually(failed)
        await eventually(lambda: _finished(spans, "chat fake-model", 5))

    mcp_spans = _mcp_spans(spans)
    methods = {s.attributes["mcp.method.name"] for s in mcp_spans}
    assert {"initialize", "tools/list", "tools/call"} <= methods
    missing = [s.name for s in mcp_spans if not s.attributes.get("mcp.session.id")]
    assert missing == []
    by_server = {s.attributes["agentd.mcp.server"] for s in mcp_spans}
    assert {"calc", "boom", "remote"} <= by_server
    # A tool whose call failed: the span says what failed, never the bare outcome.
    failing = {
        s.attributes["agentd.loop_id"]: s.attributes.get("error.type")
        for s in _named(spans, "execute_tool explode")
    }
    # boom's own tool raised (an isError result); the remote server has no such tool.
    assert failing == {str(loop.id): "tool_error", str(remote.id): "UnknownTool"}
    assert all(s.status.status_code.name == "ERROR" for s in _named(spans, "execute_tool explode"))
    # A turn that failed: the exception's class, though ErrorHandling caught it.
    failed_turns = [
        s
        for s in _named(spans, "chat fake-model")
        if s.attributes.get("agentd.loop_id") == str(doomed.id)
    ]
    assert [s.attributes["error.type"] for s in failed_turns] == ["LLMStatusError"]
    assert not any(
        (s.attributes or {}).get("error.type") in ("error", "failed")
        for s in spans.get_finished_spans()
    )


async def test_probes_and_scrapes_make_no_server_spans_under_the_fastapi_instrumentation(
    pool: Pool, database_url: str, registry: AgentRegistry, spans: Any
) -> None:
    """Caught: 2,016 of 2,237 spans were FastAPI's own, every probe and scrape among them."""
    fastapi_otel = pytest.importorskip("opentelemetry.instrumentation.fastapi")
    import httpx

    from agentd.api import untraced
    from agentd.api.state import AppState
    from agentd.app import create_app

    async with running_engine(pool, database_url, registry) as engine:
        state = AppState.create(
            settings=engine.settings,
            pool=pool,
            registry=registry,
            database_url=database_url,
            api_token="trace-token",
            engine=engine,
        )
        app = create_app(state)
        fastapi_otel.FastAPIInstrumentor.instrument_app(app)
        try:
            served = untraced.wrap(app, engine.settings.trace_excluded_paths)
            transport = httpx.ASGITransport(app=served)
            headers = {"Authorization": "Bearer trace-token"}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://t", headers=headers
            ) as c:
                for path in ("/healthz", "/readyz", "/metrics", "/healthz/", "/v1/agents"):
                    assert (await c.get(path)).status_code in (200, 307, 404), path
        finally:
            fastapi_otel.FastAPIInstrumentor.uninstrument_app(app)
    server = [s for s in spans.get_finished_spans() if s.kind.name == "SERVER"]
    names = sorted(s.name for s in server)
    assert any("/v1/agents" in n for n in names), names  # other requests are still traced
    assert not [n for n in names if any(p in n for p in ("healthz", "readyz", "metrics"))]
    assert engine.settings.trace_excluded_paths == ["/healthz", "/readyz", "/metrics"]

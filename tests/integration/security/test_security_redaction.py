"""Secrets never reach events, logs or API responses (invariant 7).

Canaries are planted where secrets live — an agent's `api_key_env`, an explicit `api_token`,
a Gemini `?key=` base URL, the bearer token of an HTTP MCP server, the API token — and loops
run through success and failure paths (an LLM 401 whose body echoes the key, MCP 500s and
401s). Then every stored event row (all columns), every log line and every API response is
scanned for each canary."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator

import httpx
import pytest
import structlog

from agentd import logs
from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.registry import AgentRegistry, agent_from_config
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall
from agentd.testing.fake_mcp import FakeMcpServer

HEX = uuid.uuid4().hex
LLM_KEY = f"sk-proj-canaryllmkey{HEX}"  # the shape of a real provider key
GEMINI_KEY = f"AIzaCanaryGeminiKey{HEX}"
EXPLICIT_KEY = f"sk-ant-canaryexplicit{HEX}"
MCP_TOKEN = f"mcp-canary-token-{HEX}"
API_TOKEN = f"api-canary-token-{HEX}"
CANARIES = {
    "llm key": LLM_KEY,
    "gemini key": GEMINI_KEY,
    "explicit key": EXPLICIT_KEY,
    "mcp token": MCP_TOKEN,
    "api token": API_TOKEN,
}


@pytest.fixture
def captured_logs() -> Iterator[io.StringIO]:
    """Every structlog line, rendered exactly as `agentd` writes it (JSON, scrubbed)."""
    buf = io.StringIO()
    logs.configure("json", "debug")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=buf))
    # stdlib loggers (httpx, asyncpg) stay at WARNING, as `logs.configure` sets them: httpx
    # logs request URLs (a Gemini `?key=`) at INFO. See docs/security.md.
    logging.getLogger().setLevel(logging.WARNING)
    try:
        yield buf
    finally:
        structlog.reset_defaults()


def agents(llm: str, mcp: str) -> AgentRegistry:
    reg = AgentRegistry()
    ext = [{"name": "ext", "url": mcp, "api_token_env": "CANARY_MCP_TOKEN", "timeout": 5}]
    common = {"model": "fake-model", "max_steps": 4, "mcps": ext}
    reg.register(
        "openai",
        agent_from_config("openai", {**common, "base_url": llm, "api_key_env": "CANARY_LLM_KEY"}),
    )
    reg.register(
        "anthropic",
        agent_from_config(
            "anthropic",
            {**common, "dialect": "anthropic", "base_url": llm, "api_key_env": "CANARY_LLM_KEY"},
        ),
    )
    reg.register(
        "gemini",
        agent_from_config(
            "gemini",
            {
                **common,
                "dialect": "gemini",
                "base_url": f"{llm}?key={GEMINI_KEY}",
                "streaming": True,
            },
        ),
    )
    explicit = agent_from_config("explicit", {**common, "base_url": llm})
    explicit.api_token = EXPLICIT_KEY  # type: ignore[attr-defined]
    reg.register("explicit", explicit)
    return reg


def leaks(blob: str) -> list[str]:
    """The canaries found in `blob`, each with the text around it."""
    out = []
    for name, secret in CANARIES.items():
        at = blob.find(secret)
        if at >= 0:
            out.append(f"{name}: ...{blob[max(0, at - 150) : at + len(secret) + 20]}...")
    return out


async def test_canary_secrets_never_reach_events_logs_or_api_responses(
    pool: Pool,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    captured_logs: io.StringIO,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("CANARY_LLM_KEY", LLM_KEY)
    monkeypatch.setenv("CANARY_MCP_TOKEN", MCP_TOKEN)
    echo_401 = Reply(
        status=401,
        error_body={
            "error": {
                "message": f"Incorrect API key provided: {LLM_KEY} {GEMINI_KEY} {EXPLICIT_KEY}",
                "type": "invalid_request_error",
            }
        },
    )
    async with FakeLLM() as fake, FakeMcpServer(token=MCP_TOKEN) as mcp:
        fake.add(Rule(match="please fail", reply=echo_401))
        fake.add(
            Rule(
                match=lambda last: last.role == "user",
                reply=Reply(tool_calls=[ToolCall("echo", {"text": "hi"})]),
            )
        )
        fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="Done.")))
        registry = agents(fake.base_url, mcp.url)
        settings = fast_settings(log_level="debug")
        lifecycle = Lifecycle(pool, registry, settings)
        ids: list[uuid.UUID] = []
        async with running_engine(pool, database_url, registry, settings=settings):
            for agent in ("openai", "anthropic", "gemini", "explicit"):
                for message in ("please work", "please fail"):
                    loop = await lifecycle.start(agent=agent, message=message)
                    ids.append(loop.id)
            mcp.fail_next(2)  # MCP failures on the way too
            for agent in ("openai", "gemini"):
                loop = await lifecycle.start(agent=agent, message="please work again")
                ids.append(loop.id)

            async def settled() -> bool:
                async with connection(pool) as conn:
                    n = await conn.fetchval(
                        "SELECT count(*) FROM loops WHERE status IN ('queued','running','init')"
                    )
                return n == 0

            await eventually(settled, within=30)
            # An MCP server that refuses the token: its 401 path.
            mcp.token = "something-else"
            loop = await lifecycle.start(agent="openai", message="please work, refused")
            ids.append(loop.id)
            await eventually(settled, within=30)

        async with connection(pool) as conn:
            statuses = await conn.fetch("SELECT status, count(*) FROM loops GROUP BY status")
            rows = await conn.fetch("SELECT * FROM events")
        by_status = {r["status"]: r["count"] for r in statuses}
        assert by_status.get("completed") and by_status.get("failed"), by_status
        assert len(mcp.requests) > 0 and any(
            r.headers.get("authorization") == f"Bearer {MCP_TOKEN}" for r in mcp.requests
        )
        assert any(r.headers.get("authorization") == f"Bearer {LLM_KEY}" for r in fake.requests)
        assert any("x-goog-api-key" in r.headers or GEMINI_KEY in r.path for r in fake.requests)
        assert len(rows) > 20

        for row in rows:
            blob = json.dumps(dict(row), default=str)
            assert leaks(blob) == []

        # Every API response, read with the canary API token.
        state = AppState(
            settings=settings,
            pool=pool,
            registry=registry,
            lifecycle=lifecycle,
            database_url=database_url,
            api_token=API_TOKEN,
        )
        app = create_app(state)
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {API_TOKEN}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://agentd.test", headers=headers
        ) as http:
            bodies: list[str] = []
            for path in ("/v1/loops?limit=100", "/v1/agents", "/metrics", "/readyz"):
                bodies.append((await http.get(path)).text)
            for loop_id in ids:
                for suffix in ("", "/messages", "/events", "/approvals"):
                    r = await http.get(f"/v1/loops/{loop_id}{suffix}")
                    assert r.status_code == 200, r.text
                    bodies.append(r.text)
            bad = await http.get("/v1/loops", headers={"Authorization": f"Bearer {API_TOKEN}x"})
            bodies.append(bad.text + json.dumps(dict(bad.headers)))
        for body in bodies:
            assert leaks(body) == []

    log_text = captured_logs.getvalue() + caplog.text
    assert '"event"' in log_text  # the JSON log lines were captured
    found = {
        name: [ln for ln in log_text.splitlines() if secret in ln][:2]
        for name, secret in CANARIES.items()
    }
    assert {k: v for k, v in found.items() if v} == {}

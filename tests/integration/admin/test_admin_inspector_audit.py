"""The Inspector's audit trail: every tool it ran has an `admin.inspector_call` event,
whatever the outcome, and arguments the API would refuse never reach a tool."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from admin_kit import Browser

from agentd import Agent
from agentd.db.pool import Pool, connection
from agentd.mcp.toolset import Toolset
from agentd.registry import AgentRegistry
from agentd.testing import agents
from agentd.testing.agents import CALLS

hazards = Toolset("hazards")
RAN: list[str] = []


@hazards.tool(description="Starts, then never answers")
async def hang(text: str) -> str:
    RAN.append("hang")
    await asyncio.Event().wait()
    return text


@hazards.tool(description="Answers with text PostgreSQL cannot hold")
async def dirty(text: str) -> str:
    RAN.append("dirty")
    return f"nul\x00here {text}"


class HazardAgent(Agent):
    model = "fake-model"
    base_url = "http://127.0.0.1:9"
    mcps = [{"name": "hazards", "toolset": hazards, "timeout": 0.2}]


@pytest.fixture
def registry() -> AgentRegistry:
    reg = agents.registry()
    reg.register("hazard", HazardAgent)
    return reg


async def _audits(pool: Pool) -> list[dict[str, Any]]:
    async with connection(pool) as conn:
        rows = await conn.fetch(
            "SELECT reason, log, request_data, response_data FROM events "
            "WHERE name = 'admin.inspector_call' ORDER BY id"
        )
    return [dict(r) for r in rows]


async def test_a_tool_that_times_out_after_starting_is_still_audited(
    operator: Browser, pool: Pool
) -> None:
    RAN.clear()
    r = await operator.post(
        "/admin/mcp/run",
        {"agent": "hazard", "server": "hazards", "tool": "hang", "arguments": '{"text": "x"}'},
    )
    assert r.status_code == 200 and "hang" in r.text
    assert RAN == ["hang"]
    [audit] = await _audits(pool)
    assert audit["log"] == "hazard/hazards/hang"
    assert audit["request_data"]["arguments"] == {"text": "x"}
    assert "error" in audit["response_data"]


async def test_a_tool_answering_with_nul_is_audited_and_shown(
    operator: Browser, pool: Pool
) -> None:
    RAN.clear()
    r = await operator.post(
        "/admin/mcp/run",
        {"agent": "hazard", "server": "hazards", "tool": "dirty", "arguments": '{"text": "y"}'},
    )
    assert r.status_code == 200
    assert RAN == ["dirty"]
    [audit] = await _audits(pool)
    assert audit["response_data"]["text"] == "nul\ufffdhere y"  # stored, made storable


@pytest.mark.parametrize(
    "arguments",
    [
        '{"a": 1, "b": "\\u0000"}',
        '{"a": 1, "b": "\\ud800"}',
        '{"a\\u0000": 1, "b": 2}',
        '{"a": NaN, "b": 1}',
        '{"a": Infinity, "b": 1}',
        '{"a": 1e400, "b": 1}',
        '{"a": 1, "b": 2, "c": ' + "[" * 65 + "]" * 65 + "}",
        '{"a": 1, "b": 2, "c": ' + "[" * 100_000 + "]" * 100_000 + "}",
    ],
)
async def test_arguments_the_api_would_refuse_are_refused_before_any_tool_runs(
    operator: Browser, pool: Pool, arguments: str
) -> None:
    CALLS.clear()
    r = await operator.post(
        "/admin/mcp/run",
        {"agent": "calc", "server": "calc", "tool": "add", "arguments": arguments},
    )
    assert r.status_code == 422, r.text[:300]
    assert "must " in r.text  # the rule broken is shown on the Inspector page
    assert CALLS == []
    assert await _audits(pool) == []  # nothing ran, so nothing to audit

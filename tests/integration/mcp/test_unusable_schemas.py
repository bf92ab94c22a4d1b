"""A tool whose input schema cannot be used is refused at discovery with a clear reason,
never a RecursionError (issue 42): nested 3,000 deep (deeper than json can parse), 900 deep
(parsed, but deeper than a recursive walk survives), not a JSON object, not an object
schema, invalid per JSON Schema, or too large. The server's other tools are used as usual;
a required tool that was refused fails the discovery naming it and why."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
import structlog

from agentd.db.pool import Pool, connection
from agentd.mcp import schemas
from agentd.registry import AgentRegistry
from agentd.store import loops
from agentd.store.models import Loop
from agentd.testing import agents
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.fake_mcp import FakeMcpServer, _write


def _nested(depth: int) -> str:
    return '{"type":"object","properties":{"a":' * depth + "{}" + "}}" * depth


BAD = {
    "deep_3000": _nested(3000),
    "deep_900": _nested(900),
    "not_a_dict": "[1, 2]",
    "not_an_object_schema": '{"type": "string"}',
    "invalid": '{"type": "object", "properties": {"x": {"type": 5}}}',
    "huge": json.dumps({"type": "object", "enum": ["x" * 1000] * 300}),
}


class HostileSchemas(FakeMcpServer):
    """The fake MCP server, whose tools/list also lists the BAD tools (written as raw JSON
    text: no encoder could write a 3,000-deep value)."""

    async def _post(
        self,
        writer: asyncio.StreamWriter,
        body: object,
        session_id: str | None,
        *,
        modern: bool = False,
    ) -> bool:
        if not (isinstance(body, dict) and body.get("method") == "tools/list"):
            return await super()._post(writer, body, session_id, modern=modern)
        good = [json.dumps(spec.listing()) for spec in self.toolset.tools.values()]
        bad = [f'{{"name": "{n}", "inputSchema": {s}}}' for n, s in BAD.items()]
        text = (
            f'{{"jsonrpc": "2.0", "id": {json.dumps(body.get("id"))}, '
            f'"result": {{"tools": [{", ".join(bad + good)}]}}}}'
        )
        return await _write(writer, 200, text.encode(), ctype="application/json")


def _registry(**entry: Any) -> AgentRegistry:
    class Remote(agents.CalcAgent):
        mcps = [entry]

    reg = AgentRegistry()
    reg.register("remote", Remote)
    return reg


async def _settled(pool: Pool, loop_id: uuid.UUID) -> Loop | None:
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop_id)
    assert row is not None
    return row if row.status in ("completed", "failed", "paused") else None


def test_the_checks_themselves() -> None:
    parsed = {n: schemas.parse(s) for n, s in BAD.items()}
    assert schemas.unusable(parsed["deep_3000"]) == "its inputSchema nests deeper than 64 levels"
    assert schemas.unusable(parsed["deep_900"]) == "its inputSchema nests deeper than 64 levels"
    assert schemas.unusable(parsed["not_a_dict"]) == (
        "its inputSchema is not a JSON object (it is list)"
    )
    assert "not an object schema" in str(schemas.unusable(parsed["not_an_object_schema"]))
    assert str(schemas.unusable(parsed["invalid"])).startswith(
        "its inputSchema is not a valid JSON Schema: properties/x/type:"
    )
    assert "bytes, over 262144" in str(schemas.unusable(parsed["huge"]))
    assert schemas.unusable(_nested_value(60)) is None
    assert schemas.unusable(None) is None
    with pytest.raises(ValueError):
        schemas.parse("[" * 5000 + "]" * 4999)  # unbalanced, deep: still a ValueError


def _nested_value(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"type": "object"}
    for _ in range((depth - 1) // 2):
        value = {"type": "object", "properties": {"a": value}}
    return value


@pytest.mark.parametrize("mode", ["json", "sse"])
async def test_unusable_tools_are_dropped_and_the_rest_are_offered(
    pool: Pool, database_url: str, mode: str
) -> None:
    async with FakeLLM() as llm, HostileSchemas(mode=mode) as server:  # type: ignore[arg-type]
        llm.add(Rule(reply=Reply(content="done")))
        reg = _registry(name="web", url=server.url)
        with structlog.testing.capture_logs() as logs:
            async with running_engine(pool, database_url, reg) as engine:
                loop = await engine.lifecycle.start(
                    agent="remote", message="hi", state={"llm": llm.base_url}
                )
                row = await eventually(lambda: _settled(pool, loop.id))
        assert row.status == "completed", row.error_message
        offered = {t["function"]["name"] for t in llm.requests[0].json["tools"]}
        assert offered and not offered & set(BAD)
        assert "echo" in offered
        dropped = {e["tool"]: e["reason"] for e in logs if e["event"] == "mcp_client.tool_dropped"}
        assert set(dropped) == set(BAD)
        assert dropped["deep_3000"] == "its inputSchema nests deeper than 64 levels"
        assert not any("RecursionError" in json.dumps(e, default=str) for e in logs)


async def test_a_required_tool_that_was_refused_fails_the_discovery_naming_it(
    pool: Pool, database_url: str
) -> None:
    async with FakeLLM() as llm, HostileSchemas() as server:
        llm.add(Rule(reply=Reply(content="done")))
        reg = _registry(name="web", url=server.url, required_tools=["deep_3000"])
        async with running_engine(pool, database_url, reg) as engine:
            loop = await engine.lifecycle.start(
                agent="remote", message="hi", state={"llm": llm.base_url}
            )
            row = await eventually(lambda: _settled(pool, loop.id))
    assert row.status == "failed"
    assert row.error_message is not None
    assert "('deep_3000' refused: its inputSchema nests deeper than 64 levels)" in (
        row.error_message
    )
    assert "RecursionError" not in row.error_message
    assert llm.requests == []

"""The MCP Inspector: list an agent's tools, run one, replay a recorded call."""

from __future__ import annotations

import re

from admin_kit import Browser

from agentd.api.state import AppState
from agentd.db.pool import Pool, connection, transaction
from agentd.testing import factories
from agentd.testing.agents import CALLS


async def test_the_inspector_lists_an_agents_tools(operator: Browser) -> None:
    page = (await operator.get("/admin/mcp?agent=calc")).text
    assert "in-process toolset calc" in page
    assert 'data-action="run-add"' in page and 'data-action="run-refund"' in page
    assert "needs approval in loops" in page
    assert re.search(r"&#34;a&#34;: 0", page)  # arguments start from the schema


async def test_run_a_tool_with_json_arguments_and_record_it(operator: Browser, pool: Pool) -> None:
    CALLS.clear()
    r = await operator.post(
        "/admin/mcp/run",
        {"agent": "calc", "server": "calc", "tool": "add", "arguments": '{"a": 2, "b": 40}'},
    )
    assert r.status_code == 200
    assert re.search(r'id="inspector-result">42</pre>', r.text)
    assert CALLS == [{"tool": "add", "a": 2, "b": 40, "key": None}]
    async with connection(pool) as conn:
        logged = await conn.fetchrow("SELECT * FROM events WHERE name = 'admin.inspector_call'")
    assert logged["reason"] == "run" and logged["log"] == "calc/calc/add"


async def test_bad_inspector_input_is_shown_on_the_page(operator: Browser) -> None:
    for data, message in [
        (
            {"agent": "calc", "server": "calc", "tool": "add", "arguments": "{nope"},
            "not valid JSON",
        ),
        ({"agent": "calc", "server": "calc", "tool": "add", "arguments": "[1]"}, "JSON object"),
        ({"agent": "ghost", "server": "calc", "tool": "add"}, "unknown agent"),
        ({"agent": "calc", "server": "ghost", "tool": "add"}, "no MCP server"),
        ({}, "unknown agent"),
    ]:
        r = await operator.post("/admin/mcp/run", data)
        assert r.status_code == 200 and message in r.text, data
    r = await operator.post(
        "/admin/mcp/run",
        {"agent": "calc", "server": "calc", "tool": "nope", "arguments": "{}"},
    )
    assert r.status_code == 200 and "pill-bad" in r.text  # the server's own error result


async def test_replay_runs_a_recorded_call_again_with_the_same_arguments(
    operator: Browser, app_state: AppState, pool: Pool
) -> None:
    CALLS.clear()
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="completed")
        await factories.mcp_tools(conn, loop.id, names={"add": False, "refund": True})
        call = await factories.tool_call(
            conn, loop, name="add", arguments={"a": 1, "b": 2}, result="3", executed=True
        )
    r = await operator.post(f"/admin/tool-calls/{call.id}/replay")
    assert r.status_code == 200
    assert f"Replayed call #{call.id}" in r.text
    assert re.search(r'id="inspector-result">3</pre>', r.text)
    assert [(c["tool"], c["a"], c["b"]) for c in CALLS] == [("add", 1, 2)]
    async with connection(pool) as conn:
        logged = await conn.fetchrow("SELECT * FROM events WHERE name = 'admin.inspector_call'")
    assert logged["tool_call_id"] == call.id and logged["loop_id"] == loop.id
    for bad in ("424242", "abc"):
        flash = await operator.flash(await operator.post(f"/admin/tool-calls/{bad}/replay"))
        assert flash.startswith("error: No tool call")

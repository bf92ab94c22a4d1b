"""Peers we did not write talk to a mounted toolset on a real uvicorn at 127.0.0.1.

- `@modelcontextprotocol/conformance` server scenarios (Node 22), both protocol eras;
- the official `mcp` Python SDK 2.x client, stateless (2026-07-28) and legacy (handshake);
- `@modelcontextprotocol/inspector-cli` (TypeScript SDK 1.x, handshake era);
- agentd's own McpClient pinned to the handshake era: re-initializes after a 404.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agentd.db.pool import Pool
from agentd.mcp.client import McpClient
from agentd.mcp.config import McpServerConfig
from agentd.mcp.http import HttpTransport

pytestmark = pytest.mark.slow

BASELINE = Path(__file__).parent / "conformance-baseline.yml"
ALICE = {"Authorization": "Bearer alice-token"}

HANDSHAKE_SCENARIOS = [
    "server-initialize",
    "server-session-lifecycle",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "dns-rebinding-protection",
]
MODERN_SCENARIOS = [
    "server-stateless",
    "http-header-validation",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "dns-rebinding-protection",
]


@pytest.mark.parametrize(
    ("scenario", "spec_version"),
    [(s, "2025-11-25") for s in HANDSHAKE_SCENARIOS]
    + [(s, "2026-07-28") for s in MODERN_SCENARIOS],
)
async def test_conformance_server_scenario_passes(
    served: str,
    node22: Path,
    node_package: Callable[[str], Path],
    tmp_path: Path,
    scenario: str,
    spec_version: str,
) -> None:
    suite = node_package("conformance") / "dist" / "index.js"
    # The suite cannot send credentials, so it talks to the `open` mount (allow_all).
    proc = await asyncio.create_subprocess_exec(
        str(node22), str(suite), "server", "--url", f"{served}/mcp/open",
        "--scenario", scenario, "--spec-version", spec_version,
        "--expected-failures", str(BASELINE), "-o", str(tmp_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, output.decode(errors="replace")[-4000:]


async def test_sdk_client_in_the_stateless_era(served: str, pool: Pool) -> None:
    async with (
        httpx2.AsyncClient(headers=ALICE) as http,
        Client(streamable_http_client(f"{served}/mcp/demo", http_client=http)) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        tools = await client.list_tools()
        assert "whoami" in [t.name for t in tools.tools]
        added = await client.call_tool("add", {"a": 2, "b": 3})
        assert added.structured_content == {"sum": 5} and not added.is_error
        who = await client.call_tool("whoami", {}, meta={"agentd/idempotencyKey": "sdk-1"})
        assert who.structured_content == {
            "principal": "alice",
            "idempotency_key": "sdk-1",
            "has_loop": False,
            "has_agent": False,
        }
        failed = await client.call_tool("test_error_handling", {})
        assert failed.is_error and "intentionally" in failed.content[0].text  # type: ignore[union-attr]
        prompt = await client.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})
        assert prompt.messages[0].content.text == "Prompt with arguments: arg1='a', arg2='b'"  # type: ignore[union-attr]
    rows = await pool.fetch("SELECT * FROM mcp_inbound_sessions")
    assert [r["session_id"].split(":")[0] for r in rows] == ["stateless"]
    count = await pool.fetchval(
        "SELECT count(*) FROM events WHERE inbound_session_id = $1", rows[0]["id"]
    )
    assert count >= 6


async def test_sdk_client_forced_into_the_handshake_era_uses_and_ends_a_session(
    served: str, pool: Pool
) -> None:
    async with (
        httpx2.AsyncClient(headers=ALICE) as http,
        Client(
            streamable_http_client(f"{served}/mcp/demo", http_client=http), mode="legacy"
        ) as client,
    ):
        assert client.protocol_version == "2025-11-25"
        added = await client.call_tool("add", {"a": 4, "b": 5})
        assert added.structured_content == {"sum": 9}
        prompt = await client.get_prompt("test_simple_prompt")
        assert prompt.messages[0].content.text == "This is a simple prompt for testing."  # type: ignore[union-attr]
    [row] = await pool.fetch("SELECT * FROM mcp_inbound_sessions")
    assert row["principal"] == "alice" and row["protocol_version"] == "2025-11-25"
    assert row["terminated_at"] is not None  # the SDK sends DELETE when it closes


async def test_agentd_client_in_the_handshake_era_reinitializes_after_a_404(
    served: str, pool: Pool
) -> None:
    url = f"{served}/mcp/demo"
    transport = HttpTransport(url, api_token="alice-token", era="handshake", timeout=10)
    client = McpClient(McpServerConfig(name="demo", url=url, timeout=10), transport=transport)
    first = await client.initialize()
    assert not first.stateless
    async with httpx.AsyncClient() as http:
        ended = await http.delete(url, headers={**ALICE, "Mcp-Session-Id": first.session_id})
    assert ended.status_code == 200
    outcome = await client.call_tool("add", {"a": 1, "b": 1}, session_id=first.session_id)
    assert outcome.structured == {"sum": 2} and outcome.session_id != first.session_id
    rows = await pool.fetch(
        "SELECT session_id, terminated_at FROM mcp_inbound_sessions ORDER BY id"
    )
    assert [r["session_id"] for r in rows] == [first.session_id, outcome.session_id]
    assert rows[0]["terminated_at"] is not None and rows[1]["terminated_at"] is None


async def test_inspector_cli_calls_a_tool_in_the_handshake_era(
    served: str, pool: Pool, node22: Path, node_package: Callable[[str], Path], tmp_path: Path
) -> None:
    build = node_package("inspector-cli") / "build"
    proc = await asyncio.create_subprocess_exec(
        str(node22), "index.js", f"{served}/mcp/demo", "--transport", "http",
        "--header", "Authorization: Bearer alice-token",
        "--method", "tools/call", "--tool-name", "add", "--tool-arg", "a=2", "b=3",
        cwd=build,  # it resolves ../package.json against the cwd
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode(errors="replace")
    assert json.loads(out)["structuredContent"] == {"sum": 5}
    [row] = await pool.fetch("SELECT * FROM mcp_inbound_sessions")
    assert row["principal"] == "alice" and not row["session_id"].startswith("stateless:")
    names = await pool.fetch(
        "SELECT name FROM events WHERE inbound_session_id = $1 ORDER BY id", row["id"]
    )
    assert [n["name"] for n in names][:2] == [
        "mcp_inbound.initialize",
        "mcp_inbound.notifications/initialized",
    ]
    assert "mcp_inbound.tools/call" in [n["name"] for n in names]

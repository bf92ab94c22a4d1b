"""Interop with MCP servers we did not write (official SDK, npm reference servers, PyPI servers)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentd.mcp.client import McpClient
from agentd.mcp.config import McpServerConfig
from agentd.mcp.http import HttpTransport
from agentd.mcp.toolbox import open_toolbox

pytestmark = pytest.mark.slow


async def test_sdk_2x_server_is_spoken_to_in_the_stateless_era(sdk_server_url: str) -> None:
    box = await open_toolbox([McpServerConfig(name="sdk", url=sdk_server_url, timeout=10)])
    session = box.sessions["sdk"]
    assert session.stateless and session.metadata["protocolVersion"] == "2026-07-28"
    assert session.metadata["serverInfo"]["name"] == "sdk-peer"
    outcome = await box.call("add", {"a": 2, "b": 3})
    assert (outcome.text, outcome.structured) == ("5", {"result": 5})
    failed = await box.call("fail", {"message": "nope"})
    assert failed.is_error and "nope" in failed.text
    transport = box.clients["sdk"].transport
    assert isinstance(transport, HttpTransport) and transport.era() == "modern"


async def test_server_everything_over_streamable_http_with_sse_answers(
    everything_http_url: str,
) -> None:
    config = McpServerConfig(
        name="everything", url=everything_http_url, tools=["echo", "get-sum"], timeout=10
    )
    box = await open_toolbox([config])
    session = box.sessions["everything"]
    assert not session.stateless and session.metadata["protocolVersion"] == "2025-11-25"
    assert [t.name for t in box.tools] == ["echo", "get-sum"]
    assert "hello" in (await box.call("echo", {"message": "hello"})).text
    assert "5" in (await box.call("get-sum", {"a": 2, "b": 3})).text
    bad = await box.call("get-sum", {"a": "x"})
    assert bad.is_error


async def test_server_everything_over_stdio(node_package: Callable[[str], Path]) -> None:
    package = node_package("server-everything")
    config = McpServerConfig(
        name="everything", command=["node", str(package / "dist" / "index.js"), "stdio"], timeout=20
    )
    client = McpClient(config)
    info = await client.initialize()
    assert info.stateless and info.metadata["serverInfo"]["name"]
    outcome = await client.call_tool("echo", {"message": "over stdio"}, session_id=info.session_id)
    assert "over stdio" in outcome.text and not outcome.is_error


async def test_server_filesystem_over_stdio_reads_inside_and_refuses_outside(
    tmp_path: Path, node_package: Callable[[str], Path]
) -> None:
    package = node_package("server-filesystem")
    (tmp_path / "note.txt").write_text("durable loops")
    config = McpServerConfig(
        name="fs",
        command=["node", str(package / "dist" / "index.js"), str(tmp_path)],
        prefix="fs",
        timeout=20,
    )
    box = await open_toolbox([config])
    assert box.find("fs__read_text_file") is not None
    ok = await box.call("fs__read_text_file", {"path": str(tmp_path / "note.txt")})
    assert "durable loops" in ok.text and not ok.is_error
    denied = await box.call("fs__read_text_file", {"path": "/etc/hostname"})
    assert denied.is_error and "denied" in denied.text.lower()


def _mcp_server_time() -> str:
    return shutil.which("mcp-server-time") or str(Path(sys.executable).parent / "mcp-server-time")


async def test_mcp_server_time_over_stdio() -> None:
    executable = _mcp_server_time()
    if not shutil.which(executable):
        pytest.skip("mcp-server-time is not installed: pip install mcp-server-time")
    config = McpServerConfig(
        name="time", command=[executable, "--local-timezone", "UTC"], timeout=20
    )
    client = McpClient(config)
    info = await client.initialize()
    outcome = await client.call_tool(
        "get_current_time", {"timezone": "UTC"}, session_id=info.session_id
    )
    assert outcome.structured["timezone"] == "UTC" and not outcome.is_error
    bad = await client.call_tool(
        "get_current_time", {"timezone": "Not/AZone"}, session_id=info.session_id
    )
    assert bad.is_error

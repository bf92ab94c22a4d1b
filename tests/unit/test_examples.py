from __future__ import annotations

import asyncio
import importlib
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.mcp.client import McpClient
from agentd.mcp.config import McpServerConfig
from agentd.mcp.mounts import McpMount
from agentd.mcp.port import CallContext
from agentd.registry import agent_from_config
from agentd.testing.up import free_port

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize("name", ["toml-agent", "stdio-agent", "mcp-server"])
def test_toml_examples_define_valid_agents(name: str) -> None:
    data = tomllib.loads((EXAMPLES / name / "agentd.toml").read_text())
    assert data["agents"]
    for agent, raw in data["agents"].items():
        agent_from_config(agent, raw)


def test_plugin_entry_points_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = EXAMPLES / "agentd-example-plugin"
    monkeypatch.syspath_prepend(str(plugin / "src"))
    meta = tomllib.loads((plugin / "pyproject.toml").read_text())
    eps = meta["project"]["entry-points"]
    for group, expected in (("agentd.agents", type), ("agentd.mcp_servers", McpMount)):
        for target in eps[group].values():
            module, _, attr = target.partition(":")
            obj = getattr(importlib.import_module(module), attr)
            assert isinstance(obj, expected)
    sys.modules.pop("agentd_example.agent", None)


async def test_plugin_mount_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES / "agentd-example-plugin" / "src"))
    from agentd_example.agent import authorize

    monkeypatch.delenv("NOTES_MCP_TOKEN", raising=False)
    assert authorize("anything", None) is None
    monkeypatch.setenv("NOTES_MCP_TOKEN", "s3cret")
    assert authorize(None, None) is None and authorize("wrong", None) is None
    assert authorize("s3cret", None) == "mcp-client"


# --- examples/mcp-server: your own MCP server, reached through agentd's MCP client ----------

MCP_EXAMPLE = EXAMPLES / "mcp-server"


def _example_mcps_entry() -> dict[str, object]:
    """The `mcps` entry of the example's agent, as agentd.toml writes it."""
    data = tomllib.loads((MCP_EXAMPLE / "agentd.toml").read_text())
    (entry,) = data["agents"]["shop"]["mcps"]
    return dict(entry)


@pytest.fixture
def example_server_url(tmp_path: Path) -> Iterator[str]:
    """examples/mcp-server/server.py, started as the README starts it (on a free port)."""
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(MCP_EXAMPLE / "server.py"), "--port", str(port)],
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the example server never listened"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_mcp_server_example_lists_and_calls_its_tools_through_agentd(
    example_server_url: str,
) -> None:
    entry = _example_mcps_entry()
    assert entry["url"] == "http://127.0.0.1:9100/mcp"  # the port the README starts it on
    client = McpClient(McpServerConfig.parse({**entry, "url": example_server_url}))
    info = await client.initialize()
    assert info.metadata["serverInfo"]["name"] == "inventory"
    tools, _ = await client.list_tools(info.session_id)  # also checks required_tools
    assert {t.name for t in tools} == {"inventory__stock", "inventory__reserve"}
    assert {t.remote_name for t in tools} == {"stock", "reserve"}
    stock = await client.call_tool("stock", {"sku": "A-100"}, session_id=info.session_id)
    assert stock.text == "12" and not stock.is_error
    unknown = await client.call_tool("stock", {"sku": "Z-9"}, session_id=info.session_id)
    assert unknown.is_error and "unknown SKU" in unknown.text
    # agentd sends each call's idempotency key; the same key again reserves nothing more
    call = CallContext(idempotency_key="agentd:tool_call:1")
    answers = [
        (
            await client.call_tool(
                "reserve",
                {"sku": "A-100", "quantity": 2},
                session_id=info.session_id,
                context=call,
            )
        ).text
        for _ in range(2)
    ]
    assert answers == ["reserved 2 of A-100; 10 left"] * 2
    left = await client.call_tool("stock", {"sku": "A-100"}, session_id=info.session_id)
    assert left.text == "10"


async def test_mcp_server_example_over_stdio() -> None:
    command = [sys.executable, str(MCP_EXAMPLE / "server.py"), "--stdio"]
    entry = {k: v for k, v in _example_mcps_entry().items() if k != "url"}
    client = McpClient(McpServerConfig.parse({**entry, "command": command}))
    info = await asyncio.wait_for(client.initialize(), 60)
    tools, _ = await client.list_tools(info.session_id)
    assert {t.remote_name for t in tools} == {"stock", "reserve"}

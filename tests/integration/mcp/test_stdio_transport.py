"""StdioTransport: spawn per call, stderr capture, hangs and crashes."""

from __future__ import annotations

import sys
import time

import pytest

from agentd.errors import McpError, ToolError, ToolTimeout
from agentd.mcp import jsonrpc
from agentd.mcp.client import McpClient
from agentd.mcp.config import McpServerConfig
from agentd.mcp.stdio import StdioTransport
from agentd.testing.conformance import handshake

FAKE = [sys.executable, "-m", "agentd.testing.fake_mcp", "--stdio"]


def test_a_shell_string_is_refused() -> None:
    with pytest.raises(ValueError, match="argv list"):
        StdioTransport("python -m server")  # type: ignore[arg-type]


async def test_a_hanging_server_raises_tool_timeout_and_is_killed() -> None:
    transport = StdioTransport([*FAKE, "--hang-on", "tools/call"], timeout=30)
    # The timeout spans spawn + initialize (a new process per call), and a loaded machine
    # can take seconds to start Python: time one handshake and give the call several times
    # that, so the server always reaches its hang before the timeout fires.
    started = time.monotonic()
    await handshake(transport)
    transport.timeout = max(1.5, 4 * (time.monotonic() - started))
    with pytest.raises(ToolTimeout, match="hanging on tools/call") as caught:
        await transport.deliver(
            jsonrpc.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
        )
    assert isinstance(caught.value, ToolError)


async def test_a_server_that_exits_mid_call_raises_mcp_error_with_its_stderr_tail() -> None:
    transport = StdioTransport([*FAKE, "--exit-on", "tools/call"], timeout=10)
    with pytest.raises(McpError, match=r"exited \(code 3\).*fatal: exiting on tools/call"):
        await transport.deliver(
            jsonrpc.request("tools/call", {"name": "echo", "arguments": {"text": "x"}})
        )


async def test_a_missing_executable_raises_mcp_error() -> None:
    with pytest.raises(McpError, match=r"I/O failed|could not"):
        await StdioTransport(["/nonexistent/mcp-server"]).deliver(jsonrpc.request("ping", {}))


async def test_stderr_is_captured_and_env_and_cwd_are_passed(tmp_path: object) -> None:
    script = (
        "import os, sys, json\n"
        "print('booting in', os.getcwd(), os.environ['GREETING'], file=sys.stderr, flush=True)\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    if 'id' in m:\n"
        "        r = {'protocolVersion': '2025-11-25', 'capabilities': {'tools': {}},"
        " 'serverInfo': {'name': 'x'}}\n"
        "        print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': r}), flush=True)\n"
    )
    transport = StdioTransport(
        [sys.executable, "-c", script], env={"GREETING": "hej"}, cwd=str(tmp_path)
    )
    init, _ = await handshake(transport)
    assert init.stderr is not None and f"booting in {tmp_path} hej" in init.stderr


async def test_client_over_stdio_lists_and_calls_tools_with_a_synthetic_session() -> None:
    client = McpClient(McpServerConfig(name="fake", command=FAKE, timeout=10))
    info = await client.initialize()
    assert info.stateless
    tools, _ = await client.list_tools(info.session_id)
    assert "echo" in {t.name for t in tools}
    outcome = await client.call_tool("add", {"a": 1, "b": 41}, session_id=info.session_id)
    assert outcome.structured == {"sum": 42} and outcome.session_id == info.session_id

"""HttpTransport and McpClient against agentd's fake Streamable-HTTP server (handshake era)."""

from __future__ import annotations

import json
import socket

import pytest

from agentd.errors import McpError, McpSessionInvalid
from agentd.mcp import jsonrpc
from agentd.mcp.client import McpClient
from agentd.mcp.config import McpServerConfig
from agentd.mcp.http import HttpTransport
from agentd.mcp.port import CallContext
from agentd.mcp.toolbox import open_toolbox
from agentd.testing.conformance import handshake
from agentd.testing.fake_mcp import FakeMcpServer


async def test_bearer_token_and_custom_headers_are_sent_and_the_token_is_redacted() -> None:
    async with FakeMcpServer(token="s3cret-token") as server:
        transport = HttpTransport(
            server.url, api_token="s3cret-token", headers={"X-Workspace-Id": "w1"}
        )
        init, session_id = await handshake(transport)
        assert session_id in server.sessions
        assert server.requests[0].headers["authorization"] == "Bearer s3cret-token"
        assert server.requests[0].headers["x-workspace-id"] == "w1"
        assert init.request_headers["Authorization"] == "[REDACTED]"
        assert "s3cret-token" not in init.raw_request + init.raw_response + json.dumps(
            init.request_headers
        )


async def test_wrong_token_raises_mcp_error() -> None:
    async with FakeMcpServer(token="right") as server:
        with pytest.raises(McpError, match="rejected the credentials"):
            await handshake(HttpTransport(server.url, api_token="wrong"))


async def test_sse_answer_keeps_progress_notifications_and_takes_the_matching_response() -> None:
    async with FakeMcpServer(mode="sse") as server:
        transport = HttpTransport(server.url)
        _, session_id = await handshake(transport)
        params = {"name": "add", "arguments": {"a": 2, "b": 3}, "_meta": {"progressToken": "p1"}}
        payload = jsonrpc.request("tools/call", params)
        delivery = await transport.deliver(payload, session_id=session_id)
        assert delivery.body is not None
        assert delivery.body["id"] == payload["id"]
        assert delivery.body["result"]["structuredContent"] == {"sum": 5}
        assert [n["method"] for n in delivery.notifications] == [
            "notifications/progress", "notifications/progress", "notifications/message"
        ]  # fmt: skip
        assert delivery.raw_response.count("data:") == 4


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("fail_next", "HTTP 500 with a non-JSON body"),
        ("drop_next", "broke the HTTP protocol"),
        ("garbage_next", "HTTP 200 with a non-JSON body"),
    ],
)
async def test_transport_failures_raise_mcp_error_with_a_clear_message(
    script: str, message: str
) -> None:
    async with FakeMcpServer() as server:
        transport = HttpTransport(server.url, era="handshake")
        _, session_id = await handshake(transport)
        getattr(server, script)(1)
        with pytest.raises(McpError, match=message):
            await transport.deliver(jsonrpc.request("tools/list", {}), session_id=session_id)


async def test_connection_refused_raises_mcp_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(McpError, match="could not connect"):
        await handshake(HttpTransport(f"http://127.0.0.1:{port}/mcp"))


async def test_slow_server_raises_mcp_error_after_the_timeout() -> None:
    async with FakeMcpServer() as server:
        server.delay = 5
        with pytest.raises(McpError, match=r"timed out after 0.2s"):
            await handshake(HttpTransport(server.url, timeout=0.2, era="handshake"))


async def test_404_with_a_session_raises_session_invalid() -> None:
    async with FakeMcpServer() as server:
        transport = HttpTransport(server.url)
        _, session_id = await handshake(transport)
        server.expire_sessions()
        with pytest.raises(McpSessionInvalid):
            await transport.deliver(jsonrpc.request("tools/list", {}), session_id=session_id)


async def test_era_is_detected_once_per_url_and_remembered() -> None:
    async with FakeMcpServer() as server:
        transport = HttpTransport(server.url)
        await handshake(transport)
        await handshake(transport)
        assert transport.era() == "handshake"
        assert [r.method for r in server.requests].count("server/discover") == 1


async def test_client_recovers_a_lost_session_over_http_and_keeps_the_idempotency_key() -> None:
    async with FakeMcpServer() as server:
        client = McpClient(McpServerConfig(name="fake", url=server.url))
        info = await client.initialize()
        server.expire_sessions()
        outcome = await client.call_tool(
            "echo",
            {"text": "again"},
            session_id=info.session_id,
            context=CallContext(tool_call_id=5),
        )
        assert outcome.text == "again" and outcome.session_id != info.session_id
        assert [c.idempotency_key for c in server.calls()] == ["agentd:tool_call:5"] * 2
        assert [c.status for c in outcome.exchanges if c.method == "tools/call"] == [None, 200]


async def test_recovery_fail_surfaces_the_session_loss() -> None:
    async with FakeMcpServer() as server:
        client = McpClient(McpServerConfig(name="fake", url=server.url, session_recovery="fail"))
        info = await client.initialize()
        server.expire_sessions()
        with pytest.raises(McpSessionInvalid):
            await client.call_tool("echo", {"text": "x"}, session_id=info.session_id)


async def test_toolbox_over_two_http_servers_rejects_a_name_collision_naming_both() -> None:
    async with FakeMcpServer() as one, FakeMcpServer() as two:
        configs = [
            McpServerConfig(name="one", url=one.url),
            McpServerConfig(name="two", url=two.url),
        ]
        with pytest.raises(McpError, match="'one' and 'two'"):
            await open_toolbox(configs)
        prefixed = [configs[0], McpServerConfig(name="two", url=two.url, prefix="b")]
        box = await open_toolbox(prefixed)
        assert box.find("b__echo") is not None and box.sessions["two"].transport_kind == "http"


async def test_fail_rate_fails_a_seeded_fraction_of_requests() -> None:
    async with FakeMcpServer(seed=1) as server:
        transport = HttpTransport(server.url)
        _, session_id = await handshake(transport)
        server.fail_rate = 0.5
        failures = 0
        for _ in range(20):
            try:
                await transport.deliver(jsonrpc.request("ping", {}), session_id=session_id)
            except McpError:
                failures += 1
        assert 3 <= failures <= 17

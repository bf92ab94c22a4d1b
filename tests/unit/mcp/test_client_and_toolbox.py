from __future__ import annotations

from typing import Any

import pytest

from agentd.errors import McpError, McpSessionInvalid
from agentd.mcp import jsonrpc
from agentd.mcp.client import McpClient, is_synthetic
from agentd.mcp.config import McpServerConfig
from agentd.mcp.port import CallContext, DeliveryResult
from agentd.mcp.toolbox import open_toolbox
from agentd.mcp.toolset import Toolset
from agentd.testing.fake_mcp import default_toolset


class ForgetfulTransport:
    """A custom transport whose server has forgotten the first session it handed out."""

    kind = "custom"

    def __init__(self) -> None:
        self.toolset = default_toolset()
        self.sessions = 0
        self.seen: list[tuple[str, str | None]] = []

    async def deliver(
        self,
        payload: dict[str, Any],
        *,
        session_id: str | None = None,
        context: CallContext | None = None,
    ) -> DeliveryResult:
        self.seen.append((str(payload.get("method")), session_id))
        if payload.get("method") == "tools/call" and session_id == "s1":
            raise McpSessionInvalid("session gone")
        result = await self.toolset.deliver(payload, session_id=session_id, context=context)
        if payload.get("method") == "initialize":
            self.sessions += 1
            result.session_id = f"s{self.sessions}"
        return result


async def test_initialize_snapshots_capabilities_and_prompts_and_synthesises_a_stateless_id() -> (
    None
):
    client = McpClient(McpServerConfig(name="fake", toolset=default_toolset()))
    info = await client.initialize()
    assert info.stateless and is_synthetic(info.session_id)
    assert info.metadata["serverInfo"]["name"] == "fake-mcp"
    assert [p["name"] for p in info.metadata["prompts"]] == ["greet"]
    assert [e.method for e in info.exchanges] == [
        "initialize",
        "notifications/initialized",
        "prompts/list",
    ]


async def test_list_tools_applies_whitelist_and_prefix_and_reads_approval_meta() -> None:
    config = McpServerConfig(
        name="fake", toolset=default_toolset(), tools=["echo", "delete_record"], prefix="f"
    )
    tools, exchanges = await McpClient(config).list_tools("stateless-x")
    assert [(t.name, t.remote_name, t.server) for t in tools] == [
        ("f__echo", "echo", "fake"),
        ("f__delete_record", "delete_record", "fake"),
    ]
    assert [t.requires_approval for t in tools] == [False, True]
    assert exchanges[0].method == "tools/list" and exchanges[0].raw_response


async def test_missing_required_tools_raise_naming_them() -> None:
    config = McpServerConfig(
        name="fake", toolset=default_toolset(), required_tools=["echo", "nope", "nada"]
    )
    with pytest.raises(McpError, match="nope, nada"):
        await McpClient(config).list_tools(None)


async def test_call_tool_sends_the_idempotency_key_and_returns_text_and_structured() -> None:
    client = McpClient(McpServerConfig(name="fake", toolset=default_toolset()))
    outcome = await client.call_tool(
        "whoami", {}, session_id="stateless-1", context=CallContext(tool_call_id=42)
    )
    assert outcome.structured == {"idempotency_key": "agentd:tool_call:42", "session_id": None}
    assert not outcome.is_error and '"agentd:tool_call:42"' in outcome.exchanges[0].raw_request


async def test_tool_failures_and_protocol_errors_both_come_back_as_error_outcomes() -> None:
    client = McpClient(McpServerConfig(name="fake", toolset=default_toolset()))
    failed = await client.call_tool("fail", {"message": "nope"}, session_id="stateless-1")
    assert (failed.is_error, failed.text, failed.error_code) == (True, "nope", None)
    unknown = await client.call_tool("ghost", {}, session_id="stateless-1")
    assert unknown.is_error and unknown.error_code == jsonrpc.INVALID_PARAMS


async def test_session_recovery_auto_reinitialises_once_and_retries() -> None:
    transport = ForgetfulTransport()
    client = McpClient(McpServerConfig(name="c", transport=transport), transport)
    info = await client.initialize()
    outcome = await client.call_tool("echo", {"text": "hi"}, session_id=info.session_id)
    assert (outcome.text, outcome.session_id) == ("hi", "s2")
    assert [e.method for e in outcome.exchanges] == [
        "tools/call", "initialize", "notifications/initialized", "prompts/list", "tools/call"
    ]  # fmt: skip
    assert outcome.exchanges[0].error == "session gone"


async def test_session_recovery_fail_raises_session_invalid() -> None:
    transport = ForgetfulTransport()
    client = McpClient(
        McpServerConfig(name="c", transport=transport, session_recovery="fail"), transport
    )
    info = await client.initialize()
    with pytest.raises(McpSessionInvalid):
        await client.call_tool("echo", {"text": "hi"}, session_id=info.session_id)
    assert transport.sessions == 1


async def test_toolbox_opens_every_server_and_finds_tools_by_advertised_name() -> None:
    search = Toolset("search")

    @search.tool
    def echo(text: str) -> str:
        return text.upper()

    box = await open_toolbox(
        [
            McpServerConfig(name="fake", toolset=default_toolset()),
            McpServerConfig(name="search", toolset=search, prefix="search"),
        ]
    )
    assert box.find("search__echo") is not None and box.find("nope") is None
    assert box.sessions["search"].transport_kind == "local"
    assert (await box.call("search__echo", {"text": "hi"})).text == "HI"
    assert (await box.call("echo", {"text": "hi"})).text == "hi"


async def test_toolbox_raises_at_initialisation_when_two_servers_advertise_a_name() -> None:
    configs = [
        McpServerConfig(name="alpha", toolset=default_toolset()),
        McpServerConfig(name="beta", toolset=default_toolset()),
    ]
    with pytest.raises(McpError, match="'alpha' and 'beta'"):
        await open_toolbox(configs)


async def test_toolbox_names_the_server_that_failed_to_initialise() -> None:
    class Down:
        kind = "custom"

        async def deliver(self, payload: dict[str, Any], **_: Any) -> DeliveryResult:
            raise McpError("connection refused")

    configs = [
        McpServerConfig(name="ok", toolset=default_toolset()),
        McpServerConfig(name="down", transport=Down()),
    ]
    with pytest.raises(McpError, match="'down' failed to initialise: connection refused"):
        await open_toolbox(configs)

"""`TransportConformance`: the checks every MCP transport must pass (subclass it, give a fixture).

```python
from agentd.testing.conformance import TransportConformance

class TestMyTransport(TransportConformance):
    @pytest.fixture
    def transport(self):
        return MyTransport(...)
```

Override `ok_call` / `error_call` when the server is not agentd's fake (its tools are
`echo`, `add`, `fail`), `stateful` when sessions must (True) or must not (False) appear,
and the `broken_transport` fixture to check that unreachable servers raise `McpError`.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest

from agentd.errors import McpError
from agentd.mcp import eras, jsonrpc
from agentd.mcp.port import DeliveryResult, Transport


async def handshake(transport: Transport) -> tuple[DeliveryResult, str | None]:
    """initialize + notifications/initialized; returns the initialize result and session id."""
    params = {
        "protocolVersion": eras.LATEST_HANDSHAKE_VERSION,
        "capabilities": {},
        "clientInfo": eras.CLIENT_INFO,
    }
    init = await transport.deliver(jsonrpc.request("initialize", params))
    await transport.deliver(
        jsonrpc.notification("notifications/initialized"), session_id=init.session_id
    )
    return init, init.session_id


def _result(delivery: DeliveryResult) -> dict[str, Any]:
    assert delivery.body is not None, "a request must be answered with a body"
    assert "error" not in delivery.body, delivery.body
    result = delivery.body["result"]
    assert isinstance(result, dict)
    return result


class TransportConformance:
    ok_call: ClassVar[tuple[str, dict[str, Any]]] = ("echo", {"text": "hello"})
    error_call: ClassVar[tuple[str, dict[str, Any]] | None] = ("fail", {"message": "boom"})
    stateful: ClassVar[bool | None] = None  # None: either is coherent
    concurrency: ClassVar[int] = 4

    @pytest.fixture
    def transport(self) -> Transport:
        raise NotImplementedError("subclasses provide a `transport` fixture")

    @pytest.fixture
    def broken_transport(self) -> Transport | None:
        """A transport whose server is unreachable; None skips the McpError check."""
        return None

    async def test_transport_has_the_port_shape(self, transport: Transport) -> None:
        assert isinstance(transport, Transport)
        assert transport.kind in ("http", "stdio", "local", "custom")

    async def test_initialize_returns_server_info_and_coherent_session_id(
        self, transport: Transport
    ) -> None:
        init, session_id = await handshake(transport)
        result = _result(init)
        assert "capabilities" in result and "protocolVersion" in result
        assert "tools" in result["capabilities"]
        assert session_id is None or (isinstance(session_id, str) and session_id)
        if self.stateful is not None:
            assert (session_id is not None) == self.stateful

    async def test_session_id_round_trips(self, transport: Transport) -> None:
        _, session_id = await handshake(transport)
        listed = await transport.deliver(jsonrpc.request("tools/list", {}), session_id=session_id)
        assert listed.session_id == session_id

    async def test_tools_list_has_names_and_object_schemas(self, transport: Transport) -> None:
        _, session_id = await handshake(transport)
        tools = _result(
            await transport.deliver(jsonrpc.request("tools/list", {}), session_id=session_id)
        )["tools"]
        assert tools, "the server advertises at least one tool"
        for tool in tools:
            assert isinstance(tool["name"], str) and tool["name"]
            assert tool["inputSchema"]["type"] == "object"
        assert self.ok_call[0] in {t["name"] for t in tools}

    async def test_tool_call_succeeds_with_content(self, transport: Transport) -> None:
        _, session_id = await handshake(transport)
        name, arguments = self.ok_call
        payload = jsonrpc.request("tools/call", {"name": name, "arguments": arguments})
        result = _result(await transport.deliver(payload, session_id=session_id))
        assert not result.get("isError")
        assert isinstance(result["content"], list)

    async def test_tool_failure_is_an_is_error_result_not_a_protocol_error(
        self, transport: Transport
    ) -> None:
        if self.error_call is None:
            pytest.skip("no failing tool call configured for this server")
        _, session_id = await handshake(transport)
        name, arguments = self.error_call
        payload = jsonrpc.request("tools/call", {"name": name, "arguments": arguments})
        result = _result(await transport.deliver(payload, session_id=session_id))
        assert result["isError"] is True
        assert result["content"][0]["type"] == "text"

    async def test_unknown_method_is_a_json_rpc_error_envelope(self, transport: Transport) -> None:
        _, session_id = await handshake(transport)
        payload = jsonrpc.request("agentd/no-such-method", {})
        delivery = await transport.deliver(payload, session_id=session_id)
        assert delivery.body is not None
        assert delivery.body["id"] == payload["id"]
        assert isinstance(delivery.body["error"]["code"], int)

    async def test_unreachable_server_raises_mcp_error(
        self, broken_transport: Transport | None
    ) -> None:
        if broken_transport is None:
            pytest.skip("this transport cannot be made unreachable")
        with pytest.raises(McpError):
            await handshake(broken_transport)

    async def test_raw_request_and_response_are_recorded(self, transport: Transport) -> None:
        init, session_id = await handshake(transport)
        assert init.raw_request and init.raw_response
        payload = jsonrpc.request("tools/list", {})
        listed = await transport.deliver(payload, session_id=session_id)
        assert '"tools/list"' in listed.raw_request
        assert '"tools"' in listed.raw_response

    async def test_concurrent_delivers_get_their_own_answers(self, transport: Transport) -> None:
        _, session_id = await handshake(transport)
        name, arguments = self.ok_call
        payloads = [
            jsonrpc.request("tools/call", {"name": name, "arguments": arguments})
            for _ in range(self.concurrency)
        ]
        answers = await asyncio.gather(
            *(transport.deliver(p, session_id=session_id) for p in payloads)
        )
        assert [a.body["id"] if a.body else None for a in answers] == [p["id"] for p in payloads]
        assert all(not _result(a).get("isError") for a in answers)

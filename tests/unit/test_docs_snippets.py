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
    compiled = compile(code, where, "exec")
    if "agentd.client" in code:
        return  # talks to a running agentd: tests/acceptance/test_docs_commands.py runs it
    exec(compiled, {"__name__": "snippet"})


@pytest.mark.parametrize(("where", "text"), _blocks("toml"), ids=lambda x: x[:40])
def test_toml_snippet_is_valid(where: str, text: str) -> None:
    data = tomllib.loads(text)
    for name, raw in data.get("agents", {}).items():
        agent_from_config(name, raw)
    for name, raw in data.get("schedules", {}).items():
        parse_spec(name, raw)


SHELL_DOCS = [
    *DOCS,
    *sorted((Path(__file__).parents[2] / "examples").glob("**/README.md")),
    *sorted((Path(__file__).parents[2] / "examples").glob("*/agentd.toml")),
]


def _curl_commands() -> list[tuple[str, str]]:
    """Every curl command in the docs (continuation lines joined; TOML comments too)."""
    out = []
    for doc in SHELL_DOCS:
        text = doc.read_text().replace("\\\n", " ")
        if doc.suffix == ".toml":
            text = "\n".join(ln.lstrip("# ") for ln in text.splitlines())
        for line in text.splitlines():
            if re.search(r"(^|[\s$(])curl\s", line):
                out.append((doc.name, line.strip()))
    return out


def test_docs_have_curl_commands() -> None:
    assert len(_curl_commands()) >= 10


@pytest.mark.parametrize(("where", "command"), _curl_commands(), ids=lambda x: x[:50])
def test_every_curl_that_sends_a_body_says_it_is_json(where: str, command: str) -> None:
    if not re.search(r"\s(-d|--data|--data-raw|--json)\s", command):
        return
    assert "content-type: application/json" in command.lower() or "--json" in command, (
        f"{where}: curl sends a body without -H 'Content-Type: application/json': {command}"
    )

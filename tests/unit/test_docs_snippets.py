"""Every code block of the docs is run or checked here, offline.

The documents: README.md, docs/*.md, examples/*/README.md and bench/README.md.

- python: compiles, its imports resolve, and it runs (one that talks to a running agentd
  is run by tests/acceptance/test_docs_commands.py instead);
- toml: parses and validates as agentd's config file (`load_settings`, agents and
  schedules too); a pyproject snippet names only entry-point groups agentd loads;
- json: parses;
- shell (bash, sh, console): every command is accounted for by `SHELL` below. `agentd`
  commands parse with agentd's own CLI parser; `python -m` modules and scripts exist and
  define every `--flag` the doc gives them; the repository paths a command names exist;
  exports run here; a command that calls the API (`curl`, api.md's `api` alias) or starts
  agentd is run by tests/acceptance/test_doc_commands_all.py (or listed there with its
  reason); the rest name why they are not run. A new command that fits none fails.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.cli import _parser
from agentd.engine.scheduler import parse_spec
from agentd.registry import agent_from_config
from agentd.settings import load_settings

ROOT = Path(__file__).parents[2]
DOCS = [
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "README.md",
]
ALL_DOCS = [
    *DOCS,
    *sorted((ROOT / "examples").glob("*/README.md")),
    ROOT / "bench" / "README.md",
]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def _name(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


def _blocks(*kinds: str) -> list[tuple[str, str]]:
    out = []
    for doc in ALL_DOCS:
        for i, m in enumerate(BLOCK.finditer(doc.read_text())):
            if m.group(1) in kinds:
                out.append((f"{_name(doc)}#{i}", m.group(2)))
    return out


# --- python ---------------------------------------------------------------------------------


def _imports(code: str) -> Iterator[tuple[str, str | None]]:
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield node.module, alias.name


@pytest.mark.parametrize(("where", "code"), _blocks("python"), ids=lambda x: x[:40])
def test_python_snippet_runs(where: str, code: str) -> None:
    compiled = compile(code, where, "exec")
    for module, name in _imports(code):
        imported = importlib.import_module(module)
        assert (
            name is None or hasattr(imported, name) or importlib.util.find_spec(f"{module}.{name}")
        ), f"{where}: `from {module} import {name}`: no such name"
    if "agentd.client" in code:
        return  # talks to a running agentd: tests/acceptance/test_docs_commands.py runs it
    exec(compiled, {"__name__": "snippet"})


def test_python_snippets_are_found() -> None:
    assert len(_blocks("python")) >= 10


# --- toml and json --------------------------------------------------------------------------

#: the entry-point groups agentd loads (registry.py, mcp/mounts.py)
ENTRY_POINT_GROUPS = {"agentd.agents", "agentd.mcp_servers"}


@pytest.mark.parametrize(("where", "text"), _blocks("toml"), ids=lambda x: x[:40])
def test_toml_snippet_is_valid(where: str, text: str, tmp_path: Path) -> None:
    data = tomllib.loads(text)
    if "project" in data:  # a plugin's pyproject.toml
        groups = set(data["project"].get("entry-points", {}))
        assert groups and groups <= ENTRY_POINT_GROUPS, f"{where}: {groups}"
        return
    config = tmp_path / "agentd.toml"
    config.write_text(text)
    load_settings(config=config)  # the whole file, as `agentd up --config` reads it
    for name, raw in data.get("agents", {}).items():
        agent_from_config(name, raw)
    for name, raw in data.get("schedules", {}).items():
        parse_spec(name, raw)


@pytest.mark.parametrize(("where", "text"), _blocks("json"), ids=lambda x: x[:40])
def test_json_snippet_parses(where: str, text: str) -> None:
    # `{…}` and `[…]` stand for what the doc leaves out
    json.loads(text.replace("{…}", "{}").replace("[…]", "[]"))


# --- curl: a body is JSON -------------------------------------------------------------------

SHELL_DOCS = [
    *ALL_DOCS,
    *sorted((ROOT / "examples").glob("*/agentd.toml")),
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


# --- shell commands -------------------------------------------------------------------------


def shell_commands() -> list[tuple[str, str]]:
    """(document, command) for every command of the shell blocks. A backslash or an open
    quote continues a command; a line of bench/README.md's usage that starts with `[`
    continues the one before."""
    out: list[tuple[str, str]] = []
    for doc in ALL_DOCS:
        for m in BLOCK.finditer(doc.read_text()):
            if m.group(1) not in ("bash", "sh", "console"):
                continue
            pending = ""
            for line in m.group(2).splitlines():
                line = line.removeprefix("$ ") if not pending else line
                pending = f"{pending}\n{line}" if pending else line
                if pending.endswith("\\"):
                    continue
                try:
                    shlex.split(pending, comments=True)
                except ValueError:  # an open quote: the command goes on
                    continue
                command, pending = pending.strip(), ""
                if not command or command.startswith("#"):
                    continue
                if command.startswith("[") and out and out[-1][0] == _name(doc):
                    out[-1] = (out[-1][0], f"{out[-1][1]} {command}")
                else:
                    out.append((_name(doc), command))
    return out


def _unbracket(word: str) -> str:
    """`[--seconds` -> `--seconds`, `3]` -> `3`; `.[dev]` stays."""
    word = word.removeprefix("[")
    return word.removesuffix("]") if "[" not in word else word


def argv_of(command: str) -> list[str]:
    """A simple command's words: continuation lines joined, comment and `&` dropped, usage
    brackets and leading VAR=value assignments removed."""
    words = shlex.split(command.replace("\\\n", " "), comments=True)
    if words and words[-1] == "&":
        words.pop()
    words = [_unbracket(w) for w in words if _unbracket(w)]
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        words.pop(0)
    return words


def flags_of(words: list[str]) -> set[str]:
    return {w.split("=", 1)[0] for w in words if w.startswith("--")}


def source_defines(source: str, flags: set[str]) -> set[str]:
    """The flags `source` does not define (as an argparse or shell option string)."""
    return {f for f in flags if f'"{f}"' not in source and f"{f})" not in source}


def repo_paths(words: list[str]) -> list[str]:
    """Words that name a path inside the repository (its first part exists at the root)."""
    out = []
    for w in words:
        if re.fullmatch(r"(\./)?[\w.-]+(/[\w.-]+)+/?", w) and "://" not in w:
            first = w.removeprefix("./").split("/")[0]
            if not first.startswith(".") and (ROOT / first).exists():  # .venv: the reader's
                out.append(w)
    return out


def check_agentd(words: list[str]) -> None:
    try:
        _parser().parse_args(words[1:])
    except SystemExit as exc:
        raise AssertionError(f"agentd's parser refuses {words}") from exc


def check_module(words: list[str]) -> None:
    module = words[words.index("-m") + 1]
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"no module {module}"
    missing = source_defines(Path(spec.origin).read_text(), flags_of(words))
    assert not missing, f"{module} defines no {sorted(missing)}"


def check_script(words: list[str]) -> None:
    script = words[1] if words[0].startswith("python") else words[0]
    path = ROOT / script
    assert path.is_file(), f"no file {script}"
    if not words[0].startswith("python"):
        assert os.access(path, os.X_OK), f"{script} is not executable"
    missing = source_defines(path.read_text(), flags_of(words))
    assert not missing, f"{script} defines no {sorted(missing)}"


def check_pip(words: list[str]) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for w in words[2:]:
        for extra in re.findall(r"\[(\w+)\]", w):
            assert extra in extras, f"pyproject.toml has no extra {extra!r}"


def check_docker(words: list[str]) -> None:
    if "--target" in words:
        stage = words[words.index("--target") + 1]
        assert f" AS {stage}\n" in (ROOT / "Dockerfile").read_text(), f"no stage {stage}"


def run_offline(command: str) -> None:
    proc = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{command}"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")},
    )
    assert proc.returncode == 0, proc.stderr


#: What each kind of command is, first match on the command's text wins:
#: (pattern, how it is checked here, or why it is not run).
SHELL: list[tuple[str, str]] = [
    (r"(^|[\s;&|(])(curl|api)\s|^alias api=", "api"),
    (r"^(export\s+)?[A-Z_][A-Z0-9_]*=\S*(\s+[A-Z_][A-Z0-9_]*=\S*)*\s*(#.*)?$", "run"),
    (r"^export\s", "run"),
    (r"^(\S+=\S+\s+)*agentd\s", "agentd"),
    (r"^pip install -e '\.\[dev\]' && pytest -n 4$", "pip+pytest"),
    (r"^pip install . && agentd demo$", "pip+agentd"),
    (r"^pip install\s", "pip"),
    (r"^python3? -m\s", "module"),
    (r"^python3? [\w./-]+\.py\b", "script"),
    (r"^bench/[\w.-]+\.sh\b", "script"),
    (r"^docker\s", "docker"),
    (r"^\.ci/container-engine$", "docker"),
    (r"^kubectl\s", "not run: needs a Kubernetes cluster (tests/deploy checks the manifests)"),
    (r"^claude mcp add\s", "not run: a third-party MCP client (Claude Code)"),
    (r"^\. \.venv/bin/activate$", "not run: activates the reader's virtual environment"),
]
#: Not run here, and why (the kinds the loop below does not run).
NOT_RUN = {
    "api": "run against a real `agentd up` by tests/acceptance/test_doc_commands_all.py",
    "agentd": "parsed here; run (or skipped with its reason) by test_doc_commands_all.py",
    "pip": "installs packages from a registry; the extras it names are checked",
    "module": "a benchmark or tool run by hand (minutes); its flags are checked",
    "script": "a benchmark, tool or server run by hand; its flags are checked",
    "docker": "needs docker (tests/deploy builds the image, slow)",
}


def how(command: str) -> str:
    for pattern, kind in SHELL:
        if re.search(pattern, command):
            return kind
    raise AssertionError(f"no rule in SHELL says how to check: {command}")


@pytest.mark.parametrize(("where", "command"), shell_commands(), ids=lambda x: x[:50])
def test_every_shell_command_is_checked(where: str, command: str) -> None:
    kind = how(command)
    for path in repo_paths(argv_of(command)):
        assert (ROOT / path).exists(), f"{where}: `{command}` names {path}, which is missing"
    if kind == "api" or kind.startswith("not run"):
        return
    parts = [argv_of(p) for p in re.split(r"\s&&\s", command)]
    if kind == "run":
        run_offline(command)
    elif kind == "agentd":
        check_agentd(parts[0])
    elif kind == "pip+agentd":
        check_pip(parts[0])
        check_agentd(parts[1])
    elif kind == "pip+pytest":
        check_pip(parts[0])  # the command itself: test_test_markers holds CI to it
    elif kind == "pip":
        check_pip(parts[0])
    elif kind == "module":
        check_module(parts[0])
    elif kind == "script":
        check_script(parts[0])
    elif kind == "docker":
        check_docker(parts[0])
    else:
        raise AssertionError(f"unknown kind {kind!r}")


def test_every_kind_that_is_not_run_says_why() -> None:
    kinds = {how(c) for _, c in shell_commands()}
    unexplained = {
        k
        for k in kinds
        if k not in ("run", "pip+agentd", "pip+pytest") and not k.startswith("not run")
    } - set(NOT_RUN)
    assert unexplained == set()
    assert {"run", "agentd", "module", "api"} <= kinds


def test_a_wrong_flag_or_path_fails() -> None:
    """The checks can fail: a flag a module lacks, an agentd option that does not exist."""
    with pytest.raises(AssertionError):
        check_module(argv_of("python -m bench.b5_wake [--no-such-flag 3]"))
    with pytest.raises(AssertionError):
        check_agentd(argv_of("agentd up --no-such-option &"))
    with pytest.raises(AssertionError):
        check_script(argv_of("python examples/mcp-server/server.py --nope"))
    with pytest.raises(AssertionError):
        check_pip(argv_of("pip install 'agentd[nope]'"))
    missing = "examples/nope/agentd.toml"
    assert repo_paths(argv_of(f"agentd up --config {missing} &")) == [missing]
    assert not (ROOT / missing).exists()


# --- links ----------------------------------------------------------------------------------

FENCED = re.compile(r"^```.*?^```", re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    text = FENCED.sub("", doc.read_text())
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def test_every_relative_link_resolves() -> None:
    broken = []
    for doc in [*ALL_DOCS, ROOT / "examples" / "README.md"]:
        for m in re.finditer(r"\]\(([^)\s]+)\)", FENCED.sub("", doc.read_text())):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            file = (doc.parent / path) if path else doc
            if not file.exists():
                broken.append(f"{_name(doc)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{_name(doc)}: {target} (no such heading)")
    assert broken == []
    assert _slug("What agentd guarantees, and what it does not") == (
        "what-agentd-guarantees-and-what-it-does-not"
    )

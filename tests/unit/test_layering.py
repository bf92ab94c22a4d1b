"""The floors of docs/concepts.md ("Where things live"), checked on the source: a module
may import its own floor and the floors below, never one above, and no two packages (nor
two modules, at import time) import each other. Also the two third-party edges the docs
name: the database driver and the web framework stay in their layers; and other libraries
are imported by their public names only."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import agentd

PACKAGE = Path(agentd.__file__).parent

#: Top floor first. A unit is a subpackage or a top-level module of agentd; `__init__` is
#: the plugin API (agentd/__init__.py). Same-floor imports are allowed unless they circle.
FLOORS: list[set[str]] = [
    {"__main__"},
    {"cli", "cli_commands"},
    {"demo", "testing"},
    {"app"},
    {"client", "admin", "__init__"},
    {"api", "pipeline"},
    {"engine"},
    {"registry", "versions"},
    {"agent", "agent_tools"},
    {"mcp", "store"},
    {"observability", "db"},
    {"llm", "logs", "settings"},
    {
        "__about__",
        "builder",
        "errors",
        "event_loop",
        "event_names",
        "json_types",
        "known_secrets",
        "redact",
        "states",
    },
]
FLOOR = {unit: level for level, units in enumerate(FLOORS) for unit in units}

#: Which units may load these libraries when they run (`if TYPE_CHECKING:` imports, which
#: only name a type, are not loads). The test kit's fixtures and servers may use any.
_WEB = {"api", "admin", "app", "testing"}
ONLY_IN = {
    "asyncpg": {"db", "store", "testing"},
    "fastapi": _WEB,
    "starlette": _WEB,
    "uvicorn": _WEB,
}


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["agentd", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _targets(node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The agentd modules an import statement loads (`from pkg import sub`: pkg.sub)."""
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names if a.name.split(".")[0] == "agentd")
        return
    assert node.level == 0, "agentd uses absolute imports only"
    if node.module is None or node.module.split(".")[0] != "agentd":
        return
    for alias in node.names:
        full = f"{node.module}.{alias.name}"
        yield full if full in MODULES else node.module


def _imports(path: Path, *, runtime_only: bool) -> Iterator[tuple[int, str]]:
    """(line, module) of every agentd import in `path`: anywhere (function bodies and
    `if TYPE_CHECKING:` too), or only those that run when the module is imported."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if runtime_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            for target in _targets(node):
                yield node.lineno, target


def _loads(path: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level name) of every import that runs (module level or in a function),
    leaving out those under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(), str(path))
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module.split(".")[0]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_unit_has_a_floor() -> None:
    units = {_unit(m) for m in MODULES}
    assert units - FLOOR.keys() == set(), "new module or package: give it a floor above"
    assert FLOOR.keys() - units == set(), "a floor names a unit that no longer exists"


def test_no_module_imports_a_higher_floor() -> None:
    upward = []
    for module, path in MODULES.items():
        unit = _unit(module)
        for line, target in _imports(path, runtime_only=False):
            if FLOOR[_unit(target)] < FLOOR[unit]:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    assert upward == []


def test_the_driver_and_the_web_framework_stay_in_their_layers() -> None:
    misplaced = []
    for module, path in MODULES.items():
        for line, name in _loads(path):
            if name in ONLY_IN and _unit(module) not in ONLY_IN[name]:
                misplaced.append(f"{path.relative_to(PACKAGE.parent)}:{line} loads {name}")
    assert misplaced == []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_private_name_of_another_library_is_imported() -> None:
    """Other libraries only through their public modules and names: a `fastapi._compat` or
    `structlog._config` changes in any release, unannounced."""
    private = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                dotted = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                dotted = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in dotted:
                parts = name.split(".")
                if parts[0] != "agentd" and any(_private(part) for part in parts):
                    private.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {name}")
    assert private == []


def test_no_two_units_import_each_other() -> None:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        unit = _unit(module)
        for _, target in _imports(path, runtime_only=False):
            if _unit(target) != unit:
                graph.setdefault(unit, set()).add(_unit(target))
    assert _cycles(graph) == []


def test_no_import_time_circle_between_modules() -> None:
    graph = {
        module: {t for _, t in _imports(path, runtime_only=True) if t != module}
        for module, path in MODULES.items()
    }
    assert _cycles(graph) == []


def test_a_type_only_import_is_not_a_load(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from starlette.requests import Request\n"
        "def f():\n    import asyncpg\n"
    )
    assert list(_loads(source)) == [(1, "typing"), (5, "asyncpg")]


def test_the_checks_see_a_circle_and_a_submodule_import() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse("from agentd.api import app\nimport agentd.engine.worker\n")
    nodes = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    assert [t for n in nodes for t in _targets(n)] == ["agentd.api.app", "agentd.engine.worker"]

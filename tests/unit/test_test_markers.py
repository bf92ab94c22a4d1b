"""The README's `pytest` stays fast and CI still runs everything."""

from __future__ import annotations

import ast
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _slow_files() -> set[str]:
    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "SLOW_FILES" for t in targets):
                return set(ast.literal_eval(node.value))  # type: ignore[arg-type]
    raise AssertionError("SLOW_FILES not found in tests/conftest.py")


def test_default_run_deselects_slow_and_ci_runs_slow_explicitly() -> None:
    opts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    args = shlex.split(opts["addopts"])
    assert args[args.index("-m") + 1] == "not slow"
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    runs = [ln for ln in ci if ln.startswith("pytest")]
    # CI's first run is exactly the README's test command (its pytest part)
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Run the tests") :]
    command = section[section.index("```bash\n") + 8 :].splitlines()[0]
    readme_pytest = command[command.index("pytest") :]
    assert readme_pytest.startswith("pytest -n "), command  # in parallel: the 5-minute budget
    assert runs[0] == f"{readme_pytest} || status=$?" and "-m slow" in runs[1], runs
    assert 'exit "$status"' in ci


def test_every_slow_file_exists_and_the_readme_explains_the_markers() -> None:
    missing = sorted(f for f in _slow_files() if not (ROOT / "tests" / f).is_file())
    assert missing == []  # a renamed file would silently join the default run
    readme = (ROOT / "README.md").read_text()
    assert "`pytest -m slow`" in readme and "| `slow` |" in readme and "| `acceptance` |" in readme

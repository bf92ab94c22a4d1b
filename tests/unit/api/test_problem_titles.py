"""Every problem type has one title wherever it is raised (RFC 9457 §3.1.3).

Caught: 422s typed `validation-error` for a bad state patch or query carried the MCP
elicitation title, since `InputInvalid`'s docstring (its title) described one subclass.
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
from collections import defaultdict
from pathlib import Path

import agentd
from agentd.api import problems
from agentd.api.problems import ApiProblem
from agentd.errors import AgentdError, InputAnswerInvalid, InputInvalid

PACKAGE = Path(agentd.__file__).parent


def _import_all() -> None:
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="agentd."):
        if info.name.startswith(("agentd.testing", "agentd.demo", "agentd.__main__")):
            continue
        importlib.import_module(info.name)


def _error_classes() -> list[type[AgentdError]]:
    _import_all()
    seen: list[type[AgentdError]] = []
    todo: list[type[AgentdError]] = [AgentdError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    return seen


def _title(cls: type[AgentdError]) -> str:
    """The title `problems.from_error` gives an error of this class (some need arguments)."""
    return problems._title(cls.__new__(cls))


def _api_problem_types() -> set[tuple[int, str]]:
    """(status, problem_type) of every `ApiProblem(<status>, ..., problem_type="...")` call."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ApiProblem"):
                continue
            status = node.args[0]
            assert isinstance(status, ast.Constant), f"{path}: ApiProblem status not a literal"
            kinds = [k.value for k in node.keywords if k.arg == "problem_type"]
            if kinds:
                assert isinstance(kinds[0], ast.Constant), f"{path}: problem_type not a literal"
                found.add((status.value, kinds[0].value))
    return found


def test_every_problem_type_has_exactly_one_title() -> None:
    titles: dict[str, set[str]] = defaultdict(set)
    for slug, title in problems._HTTP_TITLES.values():
        titles[slug].add(title)
    for cls in _error_classes():
        titles[cls.problem_type].add(_title(cls))
    for status, slug in _api_problem_types():
        titles[slug].add(ApiProblem(status, "x", problem_type=slug).title)
    clashes = {slug: sorted(t) for slug, t in titles.items() if len(t) > 1}
    assert clashes == {}


def test_a_custom_api_problem_type_names_its_own_title() -> None:
    """A type other than its status's own must be listed in TYPE_TITLES (not inherit the
    status's generic title, which belongs to another type)."""
    generic = {slug for slug, _ in problems._HTTP_TITLES.values()}
    for status, slug in _api_problem_types():
        assert slug in generic or slug in problems.TYPE_TITLES, (status, slug)


def test_only_the_elicitation_answer_speaks_of_the_mcp_server() -> None:
    plain = json.loads(problems.from_error(InputInvalid("state: must be an object")).body)
    assert plain["type"].endswith("/validation-error")
    assert plain["title"] == "The request is invalid." and "MCP" not in plain["title"]
    answer = json.loads(problems.from_error(InputAnswerInvalid("content.x: is required")).body)
    assert answer["type"].endswith("/input-answer-invalid") and answer["status"] == 422
    assert "MCP server" in answer["title"]
    mcp_titles = [cls for cls in _error_classes() if cls.status == 422 and "MCP" in _title(cls)]
    assert mcp_titles == [InputAnswerInvalid]

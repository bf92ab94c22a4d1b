from __future__ import annotations

from agentd.llm.merge import deep_merge


def test_dicts_merge_recursively_and_other_values_replace() -> None:
    base = {"a": 1, "gen": {"x": 1, "y": {"z": 1}}, "list": [1, 2]}
    merged = deep_merge(base, {"gen": {"y": {"w": 2}, "x": 5}, "list": [3], "new": True})
    assert merged == {"a": 1, "gen": {"x": 5, "y": {"z": 1, "w": 2}}, "list": [3], "new": True}
    assert base == {"a": 1, "gen": {"x": 1, "y": {"z": 1}}, "list": [1, 2]}


def test_a_scalar_can_replace_a_dict() -> None:
    assert deep_merge({"a": {"b": 1}}, {"a": None}) == {"a": None}

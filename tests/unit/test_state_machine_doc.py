"""docs/state_machine.md lists every vocabulary of agentd.states, member for member."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

from agentd import states

DOC = Path(__file__).parents[2] / "docs" / "state_machine.md"


def _vocabularies() -> dict[str, set[str]]:
    return {
        name: {m.value for m in obj}
        for name, obj in vars(states).items()
        if isinstance(obj, type) and issubclass(obj, StrEnum) and obj.__module__ == states.__name__
    }


def _documented() -> dict[str, set[str]]:
    """{Name: values} from each "## `Name`" section: the first cells of its table rows."""
    out: dict[str, set[str]] = {}
    current: str | None = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            m = re.fullmatch(r"## `(\w+)`", line)
            current = m.group(1) if m else None
            if current is not None:
                out[current] = set()
        elif current is not None and (cell := re.match(r"\| `([a-z_]+)` \|", line)):
            out[current].add(cell.group(1))
    return out


def test_doc_lists_exactly_the_enum_members() -> None:
    code, doc = _vocabularies(), _documented()
    assert sorted(doc) == sorted(code)
    for name, values in code.items():
        assert doc[name] == values, name

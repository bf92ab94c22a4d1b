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


def test_the_client_and_the_webhook_route_speak_the_same_words() -> None:
    """Two copies kept on purpose (the client imports nothing of the server; the route's
    Literal is inlined in /openapi.json), held to the enums here."""
    import typing

    from agentd.api import routes_webhooks
    from agentd.client import streaming

    assert {*states.TERMINAL, states.LoopStatus.PAUSED} == streaming.END_STATUSES
    hints = typing.get_type_hints(routes_webhooks.list_deliveries, include_extras=True)
    optional = typing.get_args(hints["status"])[0]  # Annotated[Literal[...] | None, Query()]
    (literal,) = [a for a in typing.get_args(optional) if a is not type(None)]
    assert set(typing.get_args(literal)) == {m.value for m in states.WebhookDeliveryStatus}

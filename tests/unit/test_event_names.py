"""Every event name agentd writes is an `EventName` member (or an MCP wire-log name), in
Python emitters, in SQL, in the webhook list and at the insert path itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from agentd import event_names
from agentd.event_names import WEBHOOK_EVENTS, EventName
from agentd.states import ApprovalStatus, LoopStatus
from agentd.store import events
from agentd.store.models import NewEvent

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "agentd"
FAMILIES = {str(e).split(".")[0] for e in EventName} | set(event_names.WIRE_FAMILIES)


def _emitted() -> list[tuple[str, ast.expr]]:
    """(where, expression) of every event name passed to NewEvent(name=...), a webhook's
    `type_=...`, or lifecycle's `_record(conn, loop, NAME, ...)`."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            for kw in node.keywords:
                if (called, kw.arg) in {("NewEvent", "name"), ("webhook", "type_")}:
                    found.append((where, kw.value))
            if called == "_record" and len(node.args) >= 3:
                found.append((where, node.args[2]))
    return found


#: f-strings whose head is not a literal: pipeline/wire.py's mcp_events names its events
#: f"{prefix}.{method}", prefix one of WIRE_FAMILIES (event_names.wire_name spells it so).
OPEN_FSTRINGS = {"agentd/pipeline/wire.py"}


def _problems(where: str, expr: ast.expr) -> list[tuple[str, str]]:
    text = ast.unparse(expr)
    if isinstance(expr, ast.Constant):
        return [] if event_names.is_known(str(expr.value)) else [(where, text)]
    if isinstance(expr, ast.IfExp):
        return _problems(where, expr.body) + _problems(where, expr.orelse)
    if isinstance(expr, ast.Attribute) and ast.unparse(expr.value) == "EventName":
        return [] if expr.attr in EventName.__members__ else [(where, text)]
    if isinstance(expr, ast.Call) and ast.unparse(expr.func).endswith("wire_name"):
        family = expr.args[0]
        known = isinstance(family, ast.Constant) and family.value in event_names.WIRE_FAMILIES
        return [] if known else [(where, text)]
    if isinstance(expr, ast.JoinedStr):
        head = expr.values[0]
        if isinstance(head, ast.Constant):
            return [] if str(head.value).rstrip(".") in FAMILIES else [(where, text)]
        return [] if where.split(":")[0] in OPEN_FSTRINGS else [(where, text)]
    if isinstance(expr, ast.Name) and expr.id in ("name", "event"):
        # a helper passing its argument on (lifecycle's _record, waiting.park, whose
        # parameter is typed EventName): its callers are checked here and by mypy
        return []
    return [(where, text)]


def test_every_name_an_emitter_writes_is_a_member() -> None:
    emitted = _emitted()
    assert len(emitted) > 20  # the scan finds the emitters at all
    bad = [p for where, expr in emitted for p in _problems(where, expr)]
    assert bad == []


def test_the_names_built_from_states_are_members() -> None:
    # pipeline/llm/error_handling.py: f"loop.{status}"; engine/lifecycle.py: f"tool_call.{wanted}"
    for status in (LoopStatus.FAILED, LoopStatus.PAUSED):
        assert f"loop.{status}" in set(EventName)
    for wanted in (ApprovalStatus.APPROVED, ApprovalStatus.DENIED):
        assert f"tool_call.{wanted}" in set(EventName)


def test_names_in_sql_are_members() -> None:
    quoted = re.compile(r"'((?:loop|turn|tool_call|agent|llm|schedule|webhook|admin)\.[a-z_]+)'")
    names = set()
    for path in (PACKAGE / "store" / "sql").rglob("*.sql"):
        names |= set(quoted.findall(path.read_text(encoding="utf-8")))
    assert "loop.message_received" in names  # the pattern finds them at all
    assert names - {str(e) for e in EventName} == set()
    # the loop trigger names its webhooks `'loop.' || status` for the statuses at rest
    for status in ("completed", "failed", "paused", "stopped"):
        assert f"loop.{status}" in set(EventName)


def test_webhook_events_are_members_and_documented() -> None:
    assert all(isinstance(e, EventName) for e in WEBHOOK_EVENTS)
    doc = (ROOT / "docs" / "webhooks.md").read_text(encoding="utf-8")
    assert [str(e) for e in WEBHOOK_EVENTS if str(e) not in doc] == []


@pytest.mark.parametrize("name", ["loop.finished", "loop", "mcp.", "mcp_outbound.tools/call"])
def test_the_insert_path_refuses_an_unknown_name(name: str) -> None:
    with pytest.raises(ValueError, match="unknown event name"):
        events.columns([NewEvent(name="loop.started"), NewEvent(name=name)])


def test_the_insert_path_takes_members_and_wire_names() -> None:
    names = [EventName.LOOP_COMPLETED, "turn.completed", "mcp.tools/call", "mcp_inbound.ping"]
    cols = events.columns([NewEvent(name=n) for n in names])
    assert cols[1] == names

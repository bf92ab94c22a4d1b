"""Rows built from a record or a `to_jsonb` object equal the ones the constructor builds
(store/models.py fills a frozen row's fields without calling its generated __init__)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from agentd.store.models import Loop, McpToolRow, Message
from agentd.store.webhooks import Delivery, Endpoint

NOW = datetime(2026, 12, 2, 17, 0, 0, 123456, tzinfo=UTC)
LOOP = uuid.uuid4()


def loop_values() -> dict[str, Any]:
    return {
        "id": LOOP, "agent": "calc", "subject": None, "title": None, "status": "running",
        "status_reason": "claimed", "state": {"k": [1, 2]}, "execution_token": uuid.uuid4(),
        "lease_expires_at": NOW, "lease_seconds": 30.0, "worker_id": None,
        "turn_started_at": NOW, "step_count": 2, "error_message": None, "frozen": False,
        "observed": False, "tokens_prompt": 1, "tokens_completion": 2, "tokens_cached": 0,
        "created_at": NOW, "updated_at": NOW, "cost": Decimal("0.25"), "ttft_total": 1.0,
    }  # fmt: skip


def as_json(values: dict[str, Any]) -> dict[str, Any]:
    """What `to_jsonb` gives: uuids and timestamps as strings, numerics as numbers."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if isinstance(v, uuid.UUID | datetime):
            out[k] = str(v) if isinstance(v, uuid.UUID) else v.isoformat()
        elif isinstance(v, Decimal):
            out[k] = float(v)
        else:
            out[k] = v
    return out


def test_loop_from_json_and_from_record_equal_the_constructed_row() -> None:
    values = loop_values()
    built = Loop(**values)
    assert Loop.from_record({**values, "unknown_column": 1}) == built  # type: ignore[arg-type]
    from_json = Loop.from_json({**as_json(values), "ttft_total": 1, "unknown_column": 1})
    assert from_json == built
    assert isinstance(from_json.ttft_total, float) and isinstance(from_json.id, uuid.UUID)
    assert from_json.cost == Decimal("0.25") and from_json.state_version == 1  # a default


def test_a_row_missing_a_required_field_raises_as_the_constructor_does() -> None:
    values = loop_values()
    del values["agent"]
    with pytest.raises(TypeError):
        Loop.from_record(values)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Loop.from_json(as_json(values))


def test_rows_built_without_init_stay_frozen_hashable_and_printable() -> None:
    row = McpToolRow.from_json(
        {"id": 1, "mcp_session_id": 2, "loop_id": str(LOOP), "name": "add",
         "remote_name": "add", "description": None, "input_schema": {}, "requires_approval": False,
         "mcp_name": "calc", "session_id": None, "transport_kind": "http"}
    )  # fmt: skip
    assert row.task_support is None and row.loop_id == LOOP
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.name = "other"  # type: ignore[misc]
    assert "name='add'" in repr(row)
    assert row == dataclasses.replace(row)


@pytest.mark.parametrize("cls", [Loop, Message, McpToolRow, Endpoint, Delivery])
def test_every_field_of_every_row_class_is_set(cls: type) -> None:
    fields = dataclasses.fields(cls)
    values = {f.name: None for f in fields}
    row = cls.from_record(values)  # type: ignore[attr-defined]
    assert {f.name for f in fields} <= set(vars(row))


def test_replace_equals_dataclasses_replace_and_leaves_the_original() -> None:
    row = Loop(**loop_values())
    fast = row.replace(status="completed", step_count=3)
    assert fast == dataclasses.replace(row, status="completed", step_count=3)
    assert type(fast) is Loop and row.status == "running"  # frozen: a new row
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.status = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        row.replace(no_such_field=1)  # as dataclasses.replace raises


def test_uuids_read_from_json_equal_the_constructors() -> None:
    from agentd.store.models import _uuid

    for u in (uuid.uuid4(), uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)):
        fast = _uuid(str(u))
        assert fast == u and hash(fast) == hash(u) and str(fast) == str(u)
        assert fast.version == u.version and fast.is_safe == uuid.SafeUUID.unknown
    assert _uuid("{12345678-1234-5678-1234-567812345678}") == uuid.UUID(
        "12345678-1234-5678-1234-567812345678"
    )  # another form: the constructor reads it
    with pytest.raises(ValueError):
        _uuid("zz345678-1234-5678-1234-567812345678")

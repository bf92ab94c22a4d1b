from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

from agentd.api import pagination, problems, streams
from agentd.api.problems import ApiProblem
from agentd.errors import InvalidTransition, UnknownAgent


def test_cursor_round_trips_and_is_opaque() -> None:
    at = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    lid = uuid.uuid4()
    cursor = pagination.encode(at, lid)
    assert str(lid) not in cursor and "=" not in cursor
    assert pagination.decode(cursor) == (at, lid)


@pytest.mark.parametrize("bad", ["", "!!!", "bm90IGpzb24", "WzFd", "WzEsMl0", "W251bGwsbnVsbF0"])
def test_bad_cursor_is_a_400_problem(bad: str) -> None:
    with pytest.raises(ApiProblem) as info:
        pagination.decode(bad)
    assert info.value.status == 400 and info.value.problem_type == "invalid-cursor"


def test_agentd_errors_become_problems_with_their_details() -> None:
    r = problems.from_error(InvalidTransition("cannot pause", current_status="completed"))
    body = json.loads(r.body)
    assert r.status_code == 409 and r.media_type == "application/problem+json"
    assert body == {
        "type": "https://agentd.dev/problems/invalid-transition",
        "title": "The loop cannot make that transition from its current status.",
        "status": 409,
        "detail": "cannot pause",
        "current_status": "completed",
    }
    assert problems.from_error(UnknownAgent("x", agent="x")).status_code == 422


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("m12", streams.Resume(12, None)),
        ("s7.3", streams.Resume(7, None)),
        ("d0.1", streams.Resume(0, None)),
        ("a5.9", streams.Resume(5, None)),
        # mid-stream: message 8 had shown 140 characters
        ("d7.4.8.140", streams.Resume(7, (8, 140))),
        ("s7.5.8.140", streams.Resume(7, (8, 140))),
    ],
)
def test_last_event_id_parses_to_the_message_watermark(
    value: str | None, expected: streams.Resume | None
) -> None:
    assert streams._parse_last_event_id(value) == expected


@pytest.mark.parametrize("value", ["x1", "m", "m1.2.3", "m1.2.3.4.5", "m" + "9" * 30, "12"])
def test_malformed_last_event_id_is_a_400(value: str) -> None:
    with pytest.raises(ApiProblem):
        streams._parse_last_event_id(value)

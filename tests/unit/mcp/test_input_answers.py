"""Answers to MCP input requests: validated against what the server asked, shaped for the retry."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.engine.inputs import build_response, describe
from agentd.errors import InputInvalid
from agentd.mcp.outcomes import ELICITATION_UNSUPPORTED
from agentd.mcp.outcomes import outcome as _outcome

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name"],
}


def request(**asks: dict[str, Any]) -> dict[str, Any]:
    return {"inputRequests": asks, "requestState": "s1"}


def form(schema: dict[str, Any] = SCHEMA) -> dict[str, Any]:
    return {"method": "elicitation/create", "params": {"message": "?", "requestedSchema": schema}}


def fields(exc: pytest.ExceptionInfo[InputInvalid]) -> set[str]:
    return {e["field"] for e in exc.value.details["errors"]}


def test_accept_is_validated_and_shaped_for_the_retry() -> None:
    got = build_response(
        request(who=form()), action="accept", content={"name": "Ann"}, responses=None
    )
    assert got == {
        "inputResponses": {"who": {"action": "accept", "content": {"name": "Ann"}}},
        "requestState": "s1",
    }
    with pytest.raises(InputInvalid) as exc:
        build_response(request(who=form()), action="accept", content={"age": -1}, responses=None)
    assert fields(exc) == {"content.name", "content.age"}


def test_decline_cancel_url_and_several_requests() -> None:
    url = {"method": "elicitation/create", "params": {"mode": "url", "url": "https://x"}}
    assert describe(request(go=url))[0]["mode"] == "url"
    got = build_response(request(go=url), action="accept", content=None, responses=None)
    assert got["inputResponses"] == {"go": {"action": "accept"}}
    two = request(a=form(), b=form())
    with pytest.raises(InputInvalid) as exc:
        build_response(two, action="accept", content={"name": "x"}, responses=None)
    assert fields(exc) == {"responses"}
    got = build_response(two, action="cancel", content=None, responses=None)
    assert got["inputResponses"] == {"a": {"action": "cancel"}, "b": {"action": "cancel"}}
    with pytest.raises(InputInvalid) as exc:
        build_response(two, action=None, content=None, responses={"a": {"action": "decline"}})
    assert fields(exc) == {"responses.b"}
    with pytest.raises(InputInvalid) as exc:
        build_response(
            two, action=None, content=None,
            responses={"a": {"action": "decline"}, "b": {"action": "accept", "content": {}}},
        )  # fmt: skip
    assert fields(exc) == {"responses.b.content.name"}


def test_outcomes_recognise_input_requests_tasks_and_refused_elicitation() -> None:
    asked = {"resultType": "input_required", "inputRequests": {"who": form()}}
    out = _outcome({"jsonrpc": "2.0", "id": 1, "result": asked}, "s", [])
    assert out.input_required == {"inputRequests": {"who": form()}, "requestState": None}
    task = {"task": {"taskId": "t1", "status": "working"}}
    assert _outcome({"id": 1, "result": task}, "s", []).task == task["task"]
    said = {"content": [{"type": "text", "text": "Error executing tool greet"}], "isError": True}
    out = _outcome({"id": 1, "result": said}, "s", [], refused=["elicitation/create"])
    assert out.is_error and out.text.startswith(ELICITATION_UNSUPPORTED)
    assert "Error executing tool greet" in out.text

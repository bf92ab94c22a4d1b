"""agentd.client's own logic: request shapes, problem+json to typed errors, stream resumption.
(Its behaviour against a real API is tests/acceptance/test_client.py.)"""

from __future__ import annotations

import json

import httpx
import pytest

from agentd.client import AsyncClient, Client, errors
from agentd.client.streaming import Resumption

LOOP = {
    "id": "0b6c3c1e-8a43-4d4e-9a55-2f3a8f0f6a01",
    "agent": "calc",
    "status": "queued",
    "status_reason": None,
    "step_count": 0,
    "error_message": None,
    "subject": None,
    "title": None,
    "state": {},
    "frozen": False,
    "observed": False,
    "tokens": {"prompt": 0, "completion": 0, "cached": 0, "estimated": False},
    "created_at": "2026-12-01T10:00:00Z",
    "updated_at": "2026-12-01T10:00:00Z",
}


def test_start_sends_the_idempotency_key_and_only_the_given_members() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json=LOOP)

    with Client("http://agentd", "tok", transport=httpx.MockTransport(handler)) as agentd:
        loop = agentd.start("calc", "hi", idempotency_key="req-1")
    assert str(loop.id) == LOOP["id"]
    (req,) = seen
    assert req.headers["Idempotency-Key"] == "req-1"
    assert req.headers["Authorization"] == "Bearer tok"
    assert req.headers["Content-Type"] == "application/json"
    assert json.loads(req.content) == {"agent": "calc", "message": "hi"}


async def test_problem_json_becomes_a_typed_error_with_its_members() -> None:
    body = {
        "type": "https://agentd.dev/problems/invalid-transition",
        "title": "The loop cannot make that transition.",
        "status": 409,
        "detail": "loop is completed",
        "current_status": "completed",
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json=body, headers={"content-type": "application/problem+json"})

    async with AsyncClient("http://agentd", transport=httpx.MockTransport(handler)) as agentd:
        with pytest.raises(errors.Conflict) as exc:
            await agentd.pause(LOOP["id"])
    err = exc.value
    assert (err.status, err.problem_type, err.detail) == (409, "invalid-transition", body["detail"])
    assert err.body["current_status"] == "completed"


def test_an_unreachable_api_is_a_transport_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    agentd = Client("http://agentd", transport=httpx.MockTransport(handler))
    with agentd, pytest.raises(errors.TransportError):
        agentd.get(LOOP["id"])


def test_resumption_drops_what_was_yielded_and_resumes_from_the_last_id() -> None:
    r = Resumption()
    assert r.headers() == {}
    assert r.accept("status", "s0.1", '{"status": "running", "reason": "claimed"}') is not None
    assert r.accept("message", "m2", '{"id": 2, "role": "assistant"}') is not None
    assert r.accept("message", "m3", '{"id": 3, "role": "tool"}') is not None
    assert r.headers() == {"Last-Event-ID": "m3"}
    # reconnected: the server re-sends a tool result and the unchanged status
    assert r.accept("message", "m3", '{"id": 3, "role": "tool"}') is None
    assert r.accept("status", "s3.1", '{"status": "running", "reason": "claimed"}') is None
    assert r.accept("message", "m4", '{"id": 4, "role": "tool"}') is not None
    assert not r.finished
    done = r.accept("status", "s4.2", '{"status": "completed"}')
    assert done is not None and done.data["status"] == "completed" and r.finished


def test_send_carries_the_mode_and_idempotency_key_and_parses_the_input() -> None:
    seen: list[httpx.Request] = []
    sent = {
        **LOOP,
        "sent": {
            "id": 7,
            "mode": "inject",
            "status": "pending",
            "content": "use metric",
            "message_id": None,
            "sent_by": "api",
            "created_at": "2026-12-01T10:00:01Z",
            "applied_at": None,
        },
    }

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202, json=sent)

    with Client("http://agentd", "tok", transport=httpx.MockTransport(handler)) as agentd:
        out = agentd.send(LOOP["id"], "use metric", mode="inject", idempotency_key="s-1")
        plain = agentd.send(LOOP["id"], "hi")
    assert out.sent.id == 7 and out.sent.status == "pending" and out.status == "queued"
    assert plain.sent.mode == "inject"
    first, second = seen
    assert first.headers["Idempotency-Key"] == "s-1"
    assert json.loads(first.content) == {"content": "use metric", "mode": "inject"}
    assert "Idempotency-Key" not in second.headers
    assert json.loads(second.content) == {"content": "hi"}


def test_upgrade_sends_only_the_given_members_and_a_refusal_is_a_conflict() -> None:
    seen: list[httpx.Request] = []
    plan = {
        "loop_id": LOOP["id"],
        "agent": "calc",
        "from_version": "a" * 16,
        "to_version": "b" * 16,
        "pending_upgrade": None,
        "known_from": True,
        "dry_run": True,
        "applies": "at the loop's next turn boundary",
        "diff": {"changed": ["system_prompt"]},
        "orphaned_calls": [],
    }
    refusal = {
        "type": "https://agentd.dev/problems/upgrade-would-orphan",
        "title": "Conflict",
        "status": 409,
        "detail": "pending calls",
        "orphaned_calls": ["shop__refund"],
    }

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if json.loads(request.content).get("dry_run"):
            return httpx.Response(200, json=plan)
        return httpx.Response(
            409, json=refusal, headers={"content-type": "application/problem+json"}
        )

    with Client("http://agentd", "tok", transport=httpx.MockTransport(handler)) as agentd:
        out = agentd.upgrade(LOOP["id"], dry_run=True)
        assert out.diff == {"changed": ["system_prompt"]} and out.to_version == "b" * 16
        with pytest.raises(errors.Conflict) as refused:
            agentd.upgrade(LOOP["id"], to_version="b" * 16)
    assert refused.value.problem_type == "upgrade-would-orphan"
    assert refused.value.body["orphaned_calls"] == ["shop__refund"]
    assert [(r.url.path, json.loads(r.content)) for r in seen] == [
        (f"/v1/loops/{LOOP['id']}/upgrade", {"dry_run": True}),
        (f"/v1/loops/{LOOP['id']}/upgrade", {"to_version": "b" * 16}),
    ]


def test_start_many_sends_the_items_and_retries_only_when_every_item_has_a_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1:
            raise httpx.ReadError("dropped after sending")
        return httpx.Response(201, json={"loops": [LOOP], "replayed": []})

    items: list[dict[str, object]] = [
        {"agent": "calc", "message": "hi", "idempotency_key": "k", "subject": None}
    ]
    with Client("http://agentd", "tok", transport=httpx.MockTransport(handler)) as agentd:
        (loop,) = agentd.start_many(items)
    assert str(loop.id) == LOOP["id"] and len(seen) == 2  # keyed: sent again
    assert seen[0].url.path == "/v1/loops:batch"
    assert json.loads(seen[0].content) == {
        "loops": [{"agent": "calc", "message": "hi", "idempotency_key": "k"}]
    }
    seen.clear()
    with (
        Client("http://agentd", "tok", transport=httpx.MockTransport(handler)) as agentd,
        pytest.raises(errors.TransportError),
    ):
        agentd.start_many([{"agent": "calc", "message": "hi", "max_cost": 0.5}])
    assert len(seen) == 1  # an item without a key: never sent twice

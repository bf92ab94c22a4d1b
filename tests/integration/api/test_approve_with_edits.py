from __future__ import annotations

import json

import httpx

from agentd.db.pool import Pool
from agentd.registry import AgentRegistry
from agentd.testing.agents import CALLS
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


def script_refund(fake: FakeLLM) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[ToolCall("refund", {"amount": 42})]),
        )
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="done")))


async def _pending(client: httpx.AsyncClient, lid: str) -> list[dict]:
    return (await client.get(f"/v1/loops/{lid}/approvals")).json()["items"]


async def _is(client: httpx.AsyncClient, lid: str, status: str) -> bool:
    return (await client.get(f"/v1/loops/{lid}")).json()["status"] == status


async def _parked(client: httpx.AsyncClient, fake: FakeLLM) -> tuple[str, dict]:
    r = await client.post(
        "/v1/loops", json={"agent": "calc", "message": "refund me", "state": {"llm": fake.base_url}}
    )
    lid = r.json()["id"]
    (call,) = await eventually(lambda: _pending(client, lid))
    return lid, call


async def test_approve_with_edited_arguments_runs_them_and_the_model_sees_the_edit(
    client: httpx.AsyncClient,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:
    script_refund(fake_llm)
    async with running_engine(pool, database_url, registry):
        lid, call = await _parked(client, fake_llm)
        r = await client.post(
            f"/v1/tool-calls/{call['id']}/approve",
            json={"arguments": {"amount": 10}, "reason": "capped at 10"},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["approval_status"] == "approved" and body["decided_by"] == "api:operator"
        assert body["decided_at"] is not None and body["decision_reason"] == "capped at 10"
        assert body["arguments"] == {"amount": 10}
        assert body["approved_arguments"] == {"amount": 10}
        assert body["requested_arguments"] == {"amount": 42}
        await eventually(lambda: _is(client, lid, "completed"))

    # The tool ran once, with the person's arguments, under the call's own idempotency key.
    assert [{"tool": "refund", "amount": 10, "key": f"agentd:tool_call:{call['id']}"}] == CALLS
    # The transcript keeps both; the model's next request shows the edited call.
    msgs = (await client.get(f"/v1/loops/{lid}/messages")).json()["items"]
    (tc,) = msgs[1]["tool_calls"]
    assert tc["arguments"] == {"amount": 10} and tc["requested_arguments"] == {"amount": 42}
    assert tc["result"] == "refunded 10"
    last = fake_llm.requests[-1].json["messages"]
    (sent,) = [m for m in last if m["role"] == "assistant" and m.get("tool_calls")]
    assert json.loads(sent["tool_calls"][0]["function"]["arguments"]) == {"amount": 10}
    evs = (await client.get(f"/v1/loops/{lid}/events")).json()["items"]
    (approved,) = [e for e in evs if e["name"] == "tool_call.approved"]
    logged = json.loads(approved["log"])
    assert logged["requested_arguments"] == {"amount": 42}
    assert logged["approved_arguments"] == {"amount": 10}


async def test_approve_with_arguments_off_schema_is_422_naming_the_path_and_changes_nothing(
    client: httpx.AsyncClient,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:
    script_refund(fake_llm)
    async with running_engine(pool, database_url, registry):
        lid, call = await _parked(client, fake_llm)
        r = await client.post(
            f"/v1/tool-calls/{call['id']}/approve", json={"arguments": {"amount": "lots"}}
        )
        assert r.status_code == 422
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["type"].endswith("/tool-arguments-invalid")
        assert r.json()["errors"][0]["path"] == "/amount"
        missing = await client.post(f"/v1/tool-calls/{call['id']}/approve", json={"arguments": {}})
        assert missing.status_code == 422
        assert missing.json()["errors"][0]["path"] == ""
        assert "amount" in missing.json()["errors"][0]["message"]
        not_object = await client.post(
            f"/v1/tool-calls/{call['id']}/approve", json={"arguments": [1]}
        )
        assert not_object.status_code == 422
        (still,) = await _pending(client, lid)
        assert still["approval_status"] == "pending" and still["arguments"] == {"amount": 42}
        assert still["requested_arguments"] is None
    assert CALLS == []


async def test_a_second_approve_with_other_arguments_is_409_and_the_same_ones_a_no_op(
    client: httpx.AsyncClient,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:
    script_refund(fake_llm)
    async with running_engine(pool, database_url, registry):
        lid, call = await _parked(client, fake_llm)
        url = f"/v1/tool-calls/{call['id']}/approve"
        assert (await client.post(url, json={"arguments": {"amount": 7}})).status_code == 200
        same = await client.post(url, json={"arguments": {"amount": 7}})
        assert same.status_code == 200 and same.json()["arguments"] == {"amount": 7}
        plain = await client.post(url)
        assert plain.status_code == 200 and plain.json()["approved_arguments"] == {"amount": 7}
        other = await client.post(url, json={"arguments": {"amount": 8}})
        assert other.status_code == 409 and other.json()["type"].endswith("/already-decided")
        back = await client.post(url, json={"arguments": {"amount": 42}})
        assert back.status_code == 409
        await eventually(lambda: _is(client, lid, "completed"))
    assert [c["amount"] for c in CALLS] == [7]


async def test_deny_takes_no_arguments(
    client: httpx.AsyncClient,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:
    script_refund(fake_llm)
    async with running_engine(pool, database_url, registry):
        lid, call = await _parked(client, fake_llm)
        r = await client.post(
            f"/v1/tool-calls/{call['id']}/deny", json={"arguments": {"amount": 1}}
        )
        assert r.status_code == 422  # not a field of a denial
        (still,) = await _pending(client, lid)
        assert still["approval_status"] == "pending"

from __future__ import annotations

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


async def _status(client: httpx.AsyncClient, lid: str) -> str:
    return (await client.get(f"/v1/loops/{lid}")).json()["status"]


async def test_approve_over_rest_runs_the_parked_call_once(
    client: httpx.AsyncClient,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:
    script_refund(fake_llm)
    async with running_engine(pool, database_url, registry):
        r = await client.post(
            "/v1/loops",
            json={"agent": "calc", "message": "refund me", "state": {"llm": fake_llm.base_url}},
        )
        lid = r.json()["id"]
        (call,) = await eventually(lambda: _pending(client, lid))
        assert call["name"] == "refund" and call["arguments"] == {"amount": 42}
        assert call["approval_status"] == "pending" and call["approval_required"] is True
        assert await _status(client, lid) == "waiting"
        assert CALLS == []

        r = await client.post(f"/v1/tool-calls/{call['id']}/approve", json={"reason": "ok"})
        assert r.status_code == 200 and r.json()["approval_status"] == "approved"
        assert r.json()["decision_reason"] == "ok" and r.json()["decided_by"] == "api:operator"
        again = await client.post(f"/v1/tool-calls/{call['id']}/approve")
        assert again.status_code == 200 and again.json()["approval_status"] == "approved"
        await eventually(lambda: _is(client, lid, "completed"))
        conflicting = await client.post(f"/v1/tool-calls/{call['id']}/deny")
        assert conflicting.status_code == 409
        assert conflicting.json()["type"].endswith("/already-decided")
    assert [c["amount"] for c in CALLS] == [42]
    assert await _pending(client, lid) == []
    msgs = (await client.get(f"/v1/loops/{lid}/messages")).json()["items"]
    assert msgs[1]["tool_calls"][0]["result"] == "refunded 42"


async def test_deny_over_rest_is_idempotent_and_the_tool_never_runs(
    client: httpx.AsyncClient,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:
    script_refund(fake_llm)
    async with running_engine(pool, database_url, registry):
        r = await client.post(
            "/v1/loops",
            json={"agent": "calc", "message": "refund me", "state": {"llm": fake_llm.base_url}},
        )
        lid = r.json()["id"]
        (call,) = await eventually(lambda: _pending(client, lid))
        for _ in range(2):
            r = await client.post(f"/v1/tool-calls/{call['id']}/deny", json={"reason": "no"})
            assert r.status_code == 200 and r.json()["approval_status"] == "denied"
        await eventually(lambda: _is(client, lid, "completed"))
    assert CALLS == []


async def test_decisions_on_unknown_or_malformed_tool_calls(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/tool-calls/999999/approve")
    assert r.status_code == 404 and r.json()["type"].endswith("/tool-call-not-found")
    assert (await client.post("/v1/tool-calls/abc/deny")).status_code == 422
    assert (await client.post("/v1/tool-calls/0/deny")).status_code == 422
    assert (await client.post(f"/v1/tool-calls/{2**70}/deny")).status_code == 422
    r = await client.post("/v1/tool-calls/1/approve", json={"reason": "x", "extra": 1})
    assert r.status_code == 422


async def _is(client: httpx.AsyncClient, lid: str, status: str) -> bool:
    return await _status(client, lid) == status

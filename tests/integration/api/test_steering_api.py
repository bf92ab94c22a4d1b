"""POST /v1/loops/{id}/messages with `mode` and Idempotency-Key, GET /sent-messages and the
webhook (no worker runs: the loop stays queued)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from fastapi import FastAPI

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.store import webhooks
from agentd.testing.engine import running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from tests.integration.api.test_agui import AUTH
from tests.integration.api.test_loops_routes import start
from tests.integration.api.test_streams import read_events


async def test_send_to_a_queued_loop_is_202_pending_and_listed(client: httpx.AsyncClient) -> None:
    lid = (await start(client))["id"]
    r = await client.post(f"/v1/loops/{lid}/messages", json={"content": "hi", "mode": "inject"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["id"] == lid and body["status"] == "queued"
    assert body["sent"]["mode"] == "inject" and body["sent"]["status"] == "pending"
    assert body["sent"]["message_id"] is None and body["sent"]["sent_by"] == "api:operator"
    listed = (await client.get(f"/v1/loops/{lid}/sent-messages", params={"pending": True})).json()
    assert [i["id"] for i in listed["items"]] == [body["sent"]["id"]]
    events = (await client.get(f"/v1/loops/{lid}/events")).json()["items"]
    assert "loop.message_received" in [e["name"] for e in events]


async def test_interrupt_of_a_queued_loop_applies_at_once(client: httpx.AsyncClient) -> None:
    lid = (await start(client))["id"]
    r = await client.post(f"/v1/loops/{lid}/messages", json={"content": "now", "mode": "interrupt"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "queued" and body["status_reason"] == "interrupted"
    assert body["sent"]["status"] == "applied" and body["sent"]["message_id"] > 0
    items = (await client.get(f"/v1/loops/{lid}/messages")).json()["items"]
    assert [(m["role"], m["content"]) for m in items][-1] == ("user", "now")


async def test_idempotency_key_replays_the_first_send_and_refuses_another_body(
    client: httpx.AsyncClient,
) -> None:
    lid = (await start(client))["id"]
    headers = {"Idempotency-Key": "send-1"}
    body = {"content": "once", "mode": "queue"}
    first = await client.post(f"/v1/loops/{lid}/messages", json=body, headers=headers)
    again = await client.post(f"/v1/loops/{lid}/messages", json=body, headers=headers)
    assert first.status_code == again.status_code == 202
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json()["sent"]["id"] == first.json()["sent"]["id"]
    other = await client.post(
        f"/v1/loops/{lid}/messages", json={"content": "twice"}, headers=headers
    )
    assert other.status_code == 422
    assert other.json()["type"].endswith("/idempotency-key-reused")
    listed = (await client.get(f"/v1/loops/{lid}/sent-messages")).json()["items"]
    assert len(listed) == 1


async def test_bad_mode_is_422_and_changes_nothing(client: httpx.AsyncClient) -> None:
    lid = (await start(client))["id"]
    r = await client.post(f"/v1/loops/{lid}/messages", json={"content": "x", "mode": "shout"})
    assert r.status_code == 422
    assert (await client.get(f"/v1/loops/{lid}/sent-messages")).json()["items"] == []


async def test_send_writes_a_message_received_webhook_delivery(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    async with connection(pool) as conn:
        await webhooks.upsert_endpoint(
            conn, url="http://127.0.0.1:9/hook", events=["loop.message_received"], secret_env="X"
        )
    lid = (await start(client))["id"]
    r = await client.post(f"/v1/loops/{lid}/messages", json={"content": "hi", "mode": "queue"})
    async with connection(pool) as conn:
        rows = await conn.fetch("SELECT event_type, payload FROM webhook_deliveries")
    assert [row["event_type"] for row in rows] == ["loop.message_received"]
    data = (
        json.loads(rows[0]["payload"])["data"]
        if isinstance(rows[0]["payload"], str)
        else (rows[0]["payload"]["data"])
    )
    assert data["input_id"] == r.json()["sent"]["id"] and data["mode"] == "queue"
    assert data["loop_status"] == "queued" and data["sent_by"] == "api:operator"


async def test_the_live_stream_shows_the_send_and_then_the_applied_message(
    app: FastAPI,
    live_server: Any,
    fake_llm: FakeLLM,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
) -> None:
    fake_llm.add(Rule(match="START", reply=Reply(content="first", delay_before_first_byte=1.5)))
    fake_llm.add(Rule(match="LATER", reply=Reply(content="second")))
    async with (
        live_server(app) as base_url,
        httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client,
    ):
        r = await client.post(
            "/v1/loops",
            json={"agent": "calc", "message": "START", "state": {"llm": fake_llm.base_url}},
        )
        lid = r.json()["id"]
        async with running_engine(pool, database_url, registry):
            reader = asyncio.create_task(read_events(client, lid))
            await fake_llm.wait_for_requests(1)
            sent = await client.post(f"/v1/loops/{lid}/messages", json={"content": "LATER"})
            assert sent.status_code == 202
            events = await asyncio.wait_for(reader, 30)
    kinds = [(e.get("event"), e.get("data", {})) for e in events]
    (i,) = [n for n, (k, _) in enumerate(kinds) if k == "sent"]
    assert kinds[i][1] == {"input_id": sent.json()["sent"]["id"], "mode": "queue"}
    later = [n for n, (k, d) in enumerate(kinds) if k == "message" and d["content"] == "LATER"]
    assert later and later[0] > i
    assert kinds[-1][0] == "status" and kinds[-1][1]["status"] == "completed"

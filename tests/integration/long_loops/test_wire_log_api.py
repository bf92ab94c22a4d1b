"""End to end: every request a loop sent is in GET /v1/loops/{id}/events and the admin's
Events tab as it was sent — the body rebuilt from the loop's wire parts is byte for byte
what reached the model, and its SHA-256 is the one recorded at send time."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx
from long_loops_kit import in_status

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, LastMessage, Reply, Rule, ToolCall


class RawFake(FakeLLM):
    """Keeps the raw bytes of every request body."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: list[bytes] = []

    async def _respond(self, conn: Any, request: Any, body: bytes) -> None:
        self.raw.append(body)
        await super()._respond(conn, request, body)


async def test_events_show_each_request_exactly_as_sent(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    client: httpx.AsyncClient,
    admin: httpx.AsyncClient,
) -> None:
    n = {"i": 0}

    def reply(last: LastMessage) -> Reply:
        n["i"] += 1
        if n["i"] > 8:
            return Reply(content="done — été 😀")
        return Reply(tool_calls=[ToolCall("add", {"a": n["i"], "b": 2})])

    async with RawFake() as fake:
        fake.add(Rule(match=None, reply=reply))
        async with running_engine(pool, database_url, registry) as engine:
            loop = await engine.lifecycle.start(
                agent="calc", message="add ünïcode", state={"llm": fake.base_url}
            )
            await eventually(in_status(pool, loop.id, "completed"), within=30)
        raw = {hashlib.sha256(b).hexdigest(): b for b in fake.raw}
    r = await client.get(f"/v1/loops/{loop.id}/events", params={"limit": 1000})
    assert r.status_code == 200, r.text
    requests = [e for e in r.json()["items"] if e["name"] == "llm.request"]
    assert len(requests) == len(raw) == 9
    for e in requests:
        ref = e["request_data"]["body_ref"]
        assert ref["verified"] is True and ref["redacted"] is False
        sent = raw[ref["sha256"]]
        assert e["request_data"]["body"] == json.loads(sent)
        assert ref["bytes"] == len(sent)
    # Storage: no event row holds a transcript; the loop's parts hold each piece once.
    async with connection(pool) as conn:
        whole = await conn.fetchval(
            "SELECT count(*) FROM events WHERE loop_id = $1 AND request_data ? 'body'", loop.id
        )
        parts = await conn.fetchval("SELECT count(*) FROM wire_parts WHERE loop_id = $1", loop.id)
    assert whole == 0
    assert parts <= 4 * len(requests) + 4
    # The admin's Events tab shows the rebuilt request too.
    page = await admin.get(f"/admin/loops/{loop.id}", params={"tab": "events"})
    assert page.status_code == 200
    assert "add ünïcode" in page.text and "You add numbers." in page.text

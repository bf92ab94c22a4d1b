"""Steering messages across a worker SIGKILL, black box: real `agentd api` and `agentd
worker` processes; messages sent over REST while a turn streams are accepted (202), the
worker is killed before any is applied, and another worker applies each exactly once, in
the order sent; a retried send (same Idempotency-Key) adds nothing."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.db.pool import Pool, connection
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.up import free_port

from ._procs import LEASE, fleet, loop_row, poll

pytestmark = [pytest.mark.acceptance, pytest.mark.slow, pytest.mark.timeout(180)]

TOKEN = "steering-acceptance-token"
ENDLESS = "Thinking it over, slowly and carefully. " * 2000


async def _visible(pool: Pool, loop_id: uuid.UUID) -> list[tuple[str, str]]:
    async with connection(pool) as conn:
        rows = await conn.fetch(
            "SELECT role, content FROM messages WHERE loop_id = $1 AND NOT hidden ORDER BY id",
            loop_id,
        )
    return [(r["role"], r["content"]) for r in rows]


async def _streaming(pool: Pool, loop_id: uuid.UUID) -> bool:
    async with connection(pool) as conn:
        n = await conn.fetchval(
            "SELECT count(*) FROM messages WHERE loop_id = $1 AND status = 'processing' "
            "AND length(content) > 8",
            loop_id,
        )
    return bool(n)


async def test_sigkill_between_accept_and_apply_applies_each_message_once_in_order(
    pool: Pool, database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    async with FakeLLM() as fake, fleet(tmp_path, database_url) as f:
        fake.add(
            Rule(
                match="START",
                reply=Reply(content=ENDLESS, chunk_size=4, chunk_delay=0.03),
                times=1,
            )
        )
        # The turn that replaces the killed one sees both messages (a turn start is a turn
        # boundary); it answers slowly, so a queued message arrives while it runs.
        fake.add(Rule(match="I1", reply=Reply(content="answer one", delay_before_first_byte=2)))
        fake.add(Rule(match="Q2", reply=Reply(content="answer two")))
        await f.start("api", "api", AGENTD_API_TOKEN=TOKEN, AGENTD_PORT=str(port))
        a = await f.worker("worker-a", pool)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=10
        ) as http:

            async def ready() -> bool:
                try:
                    return (await http.get("/readyz")).status_code == 200
                except httpx.TransportError:
                    return False

            await poll(ready, within=60, what="api ready")
            r = await http.post(
                "/v1/loops",
                json={"agent": "calc", "message": "START", "state": {"llm": fake.base_url,
                                                                     "stream": True}},
            )  # fmt: skip
            assert r.status_code == 201, r.text
            loop_id = uuid.UUID(r.json()["id"])
            await poll(lambda: _streaming(pool, loop_id), within=30, what="turn streaming")

            async def send(content: str, mode: str, key: str) -> dict[str, Any]:
                r = await http.post(
                    f"/v1/loops/{loop_id}/messages",
                    json={"content": content, "mode": mode},
                    headers={"Idempotency-Key": key},
                )
                assert r.status_code == 202, r.text
                return r.json()["sent"]

            q1 = await send("Q1", "queue", "q1")
            i1 = await send("I1", "inject", "i1")
            assert (await loop_row(pool, loop_id))["steer_pending"] == 2

            a.kill9()
            assert await a.exited(5) == -signal.SIGKILL
            await f.worker("worker-b", pool)
            # the client retries a send whose answer it lost: nothing new is added
            assert (await send("I1", "inject", "i1"))["id"] == i1["id"]

            async def applied() -> bool:
                return len(fake.requests) >= 2

            await poll(applied, within=LEASE + 10, what="a new turn after the kill")
            q2 = await send("Q2", "queue", "q2")

            async def completed() -> bool:
                return (await loop_row(pool, loop_id))["status"] == "completed"

            await poll(completed, within=30, what="loop completed")
            inputs = (await http.get(f"/v1/loops/{loop_id}/sent-messages")).json()["items"]
    assert [(i["id"], i["status"]) for i in inputs] == [
        (q1["id"], "applied"),
        (i1["id"], "applied"),
        (q2["id"], "applied"),
    ]
    assert await _visible(pool, loop_id) == [
        ("user", "START"),
        ("user", "Q1"),
        ("user", "I1"),
        ("assistant", "answer one"),
        ("user", "Q2"),
        ("assistant", "answer two"),
    ]
    row = await loop_row(pool, loop_id)
    assert row["steer_pending"] == 0 and not row["steer_release"]

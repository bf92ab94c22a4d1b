"""A worker SIGKILLed mid-delivery: every webhook still arrives, with its own webhook-id.

What is asserted, precisely: the receiver verifies every request's Standard Webhooks
signature and records each arrival by `webhook-id`. Its deduped record holds exactly one
id per loop completion (3). Every id that reached the receiver from the worker that was
then killed (the receiver held those requests, so none was answered) arrived exactly
twice: once from the killed worker and once re-sent by the next one with the SAME id;
every other id arrived exactly once (a request cut mid-body still counts as arriving). Each
delivery row ends `delivered`, with one attempt per arrival, plus one when the killed worker
claimed it but died before any byte reached the receiver.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.testing import agents
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.webhook_receiver import WebhookReceiver, new_secret

from ._procs import fleet, lifecycle_settings, poll

pytestmark = pytest.mark.slow


async def test_sigkill_mid_delivery_redelivers_each_held_webhook_once_with_the_same_id(
    tmp_path: Path, pool: Pool, database_url: str
) -> None:
    secret = new_secret()
    lifecycle = Lifecycle(pool, agents.registry(), lifecycle_settings())
    async with (
        FakeLLM() as fake,
        WebhookReceiver(secret, hold=True) as rx,
        fleet(tmp_path, database_url) as f,
    ):
        fake.add(Rule(match=lambda last: True, reply=Reply(content="done")))
        config = tmp_path / "agentd.toml"
        config.write_text(
            config.read_text() + f'\n[[webhooks]]\nurl = "{rx.url}"\nevents = ["loop.completed"]\n'
            'secret_env = "HOOK_SECRET"\ntimeout = 30\nretry_base_delay = 0.1\n'
        )
        first = await f.worker("worker-1", pool, HOOK_SECRET=secret)
        loop_ids: list[uuid.UUID] = []
        for i in range(3):
            loop = await lifecycle.start(
                agent="calc", message=f"hi {i}", state={"llm": fake.base_url}
            )
            loop_ids.append(loop.id)
        await rx.wait_for(lambda: len(rx.arrivals) >= 1, within=30)
        first.kill9()  # mid-delivery: the receiver has not answered anything yet
        await first.exited(within=10)
        rx.release()
        rx.tag = "worker-2"  # anything arriving from here on was sent by the next worker
        await f.worker("worker-2", pool, HOOK_SECRET=secret)

        async def all_delivered() -> bool:
            async with connection(pool) as conn:
                n = await conn.fetchval(
                    "SELECT count(*) FROM webhook_deliveries WHERE status = 'delivered'"
                )
            return n == 3

        await poll(all_delivered, within=60, what="three deliveries delivered")

    # Every request that arrived whole was signed; only the killed worker's could be cut.
    assert all(a.verified for a in rx.arrivals if not a.cut)
    assert all(a.tag == "" for a in rx.arrivals if a.cut)
    assert len(rx.ids) == 3  # one distinct webhook-id per completed loop
    bodies = [rx.first(i).body for i in rx.ids]
    assert sorted(b["data"]["loop_id"] for b in bodies if b) == sorted(map(str, loop_ids))
    # Sent by the killed worker (it never got an answer), whether before or just after the
    # kill was noticed: every such id must be re-sent once by worker-2, with the same id.
    held = {a.webhook_id for a in rx.arrivals if a.tag == ""}
    counts = rx.counts()
    assert held and all(counts[i] == 2 for i in held), (held, counts)
    assert all(counts[i] == 1 for i in rx.ids if i not in held), (held, counts)
    async with connection(pool) as conn:
        rows = await conn.fetch("SELECT message_id, status, attempts FROM webhook_deliveries")
    assert {r["message_id"] for r in rows} == set(rx.ids)
    assert all(r["status"] == "delivered" for r in rows)
    # One attempt per arrival, plus at most one the killed worker claimed but died before
    # any byte of it reached the receiver (a claim is an attempt): then worker-2 re-sent it.
    attempts = {r["message_id"]: r["attempts"] for r in rows}
    for i in rx.ids:
        assert attempts[i] - counts[i] in (0, 1), (i, attempts, counts)
        if attempts[i] > counts[i]:
            assert i not in held and rx.first(i).tag == "worker-2", (i, attempts, counts)

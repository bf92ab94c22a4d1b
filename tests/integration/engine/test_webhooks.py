from __future__ import annotations

import uuid

import httpx
import pytest

from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool, connection
from agentd.engine.webhooks import WebhookDeliverer
from agentd.errors import ConfigError
from agentd.registry import AgentRegistry
from agentd.settings import Settings, WebhookConfig
from agentd.store import webhooks
from agentd.testing import agents, factories
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall
from agentd.testing.webhook_receiver import WebhookReceiver, new_secret

SECRET_ENV = "AGENTD_TEST_WEBHOOK_SECRET"
TOKEN = "operator-token-for-tests"


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    value = new_secret()
    monkeypatch.setenv(SECRET_ENV, value)
    return value


def _settings(url: str, events: list[str], max_attempts: int = 10) -> Settings:
    hook = WebhookConfig(
        url=url,
        events=events,
        secret_env=SECRET_ENV,
        retry_base_delay=0.05,
        max_attempts=max_attempts,
    )
    return fast_settings(webhooks=[hook])


async def _deliveries(pool: Pool) -> list[webhooks.Delivery]:
    async with connection(pool) as conn:
        return list(reversed(await webhooks.list_(conn)))


async def test_approval_and_completion_are_delivered_signed_once_each(
    pool: Pool, database_url: str, secret: str
) -> None:
    registry = agents.registry()
    async with FakeLLM() as fake, WebhookReceiver(secret) as rx:
        fake.add(
            Rule(
                match=lambda last: last.role == "user",
                reply=Reply(tool_calls=[ToolCall("refund", {"amount": 5})]),
            )
        )
        fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="done")))
        settings = _settings(rx.url, ["loop.completed", "tool_call.awaiting_approval"])
        async with running_engine(pool, database_url, registry, settings=settings) as engine:
            loop = await engine.lifecycle.start(
                agent="calc", message="refund", state={"llm": fake.base_url}
            )
            (first,) = await rx.wait_for_ids(1)
            body = rx.first(first).body
            assert body is not None and body["type"] == "tool_call.awaiting_approval"
            assert body["data"]["loop_id"] == str(loop.id) and body["data"]["name"] == "refund"
            await engine.lifecycle.decide(body["data"]["tool_call_id"], approve=True)
            ids = await rx.wait_for_ids(2)
    done = rx.first(ids[1]).body
    assert done is not None and done["type"] == "loop.completed"
    assert done["data"]["status"] == "completed" and done["data"]["agent"] == "calc"
    # One name for the reason, as on the loop resource (`reason` kept for old receivers).
    assert done["data"]["status_reason"] == done["data"]["reason"] == "model_finished"
    assert all(a.verified for a in rx.arrivals)
    assert sorted(rx.counts().values()) == [1, 1]
    headers = rx.first(ids[0]).headers
    assert headers["webhook-signature"].startswith("v1,")
    assert headers["webhook-id"].startswith("msg_") and headers["webhook-timestamp"].isdigit()
    rows = await _deliveries(pool)
    assert [(d.event_type, d.status, d.attempts) for d in rows] == [
        ("tool_call.awaiting_approval", "delivered", 1),
        ("loop.completed", "delivered", 1),
    ]
    assert [d.message_id for d in rows] == ids


async def test_a_failing_receiver_gets_retries_with_the_same_webhook_id(
    pool: Pool, secret: str
) -> None:
    async with WebhookReceiver(secret, fail_first=2) as rx:
        settings = _settings(rx.url, ["loop.paused"])
        deliverer = WebhookDeliverer(settings, pool, worker_id=uuid.uuid4())
        await deliverer.sync_config()
        async with connection(pool) as conn:
            row = await factories.loop(conn, status="running")
            await factories.set_loop(conn, row.id, status="paused")
        deliverer.http = httpx.AsyncClient()
        try:
            reports = []
            for _ in range(50):
                reports.append(await deliverer.deliver_once())
                if reports[-1].delivered:
                    break
                await eventually(lambda: _due(pool), within=5)
        finally:
            await deliverer.http.aclose()
    assert sum(r.retried for r in reports) == 2 and sum(r.delivered for r in reports) == 1
    (only,) = rx.counts().keys()
    assert rx.counts()[only] == 3  # the same id on all three attempts
    (d,) = await _deliveries(pool)
    assert d.status == "delivered" and d.attempts == 3 and d.message_id == only
    assert d.last_status == 204


async def _due(pool: Pool) -> bool:
    async with connection(pool) as conn:
        return bool(
            await conn.fetchval(
                "SELECT count(*) FROM webhook_deliveries "
                "WHERE status = 'pending' AND next_attempt_at <= now()"
            )
        )


async def test_out_of_attempts_is_failed_and_a_resend_delivers_it_with_the_same_id(
    pool: Pool, database_url: str, secret: str
) -> None:
    async with WebhookReceiver(secret, fail_first=1) as rx:
        settings = _settings(rx.url, ["loop.failed"], max_attempts=1)
        deliverer = WebhookDeliverer(settings, pool, worker_id=uuid.uuid4())
        await deliverer.sync_config()
        async with connection(pool) as conn:
            row = await factories.loop(conn, status="running")
            await factories.set_loop(conn, row.id, status="failed")
        deliverer.http = httpx.AsyncClient()
        try:
            report = await deliverer.deliver_once()
            assert report.failed == 1
            (d,) = await _deliveries(pool)
            assert d.status == "failed" and d.last_status == 500
            assert d.last_error is not None and "HTTP 500" in d.last_error
            state = AppState.create(
                settings=settings,
                pool=pool,
                registry=agents.registry(),
                database_url=database_url,
                api_token=TOKEN,
            )
            api = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=create_app(state)),
                base_url="http://agentd.test",
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            async with api:
                listed = (await api.get("/v1/webhook-deliveries?status=failed")).json()
                assert [x["id"] for x in listed["items"]] == [d.id]
                r = await api.post(f"/v1/webhook-deliveries/{d.id}/resend")
                assert r.status_code == 200 and r.json()["status"] == "pending"
                assert (await api.post("/v1/webhook-deliveries/999999/resend")).status_code == 404
                endpoints = (await api.get("/v1/webhooks")).json()["items"]
                assert endpoints[0]["secret_env"] == SECRET_ENV
                assert secret not in str(endpoints)
            assert (await deliverer.deliver_once()).delivered == 1
        finally:
            await deliverer.http.aclose()
    assert list(rx.counts().values()) == [2]
    (d,) = await _deliveries(pool)
    assert d.status == "delivered" and d.attempts == 2


async def test_budget_exceeded_is_its_own_event_besides_paused(pool: Pool, secret: str) -> None:
    async with WebhookReceiver(secret) as rx:
        settings = _settings(rx.url, ["loop.budget_exceeded"])
        deliverer = WebhookDeliverer(settings, pool, worker_id=uuid.uuid4())
        await deliverer.sync_config()
        async with connection(pool) as conn:
            a = await factories.loop(conn, status="running")
            b = await factories.loop(conn, status="running")
            await factories.set_loop(conn, a.id, status="paused", status_reason="paused_by_user")
            await factories.set_loop(
                conn, b.id, status="paused", status_reason="token_budget_exceeded"
            )
        rows = await _deliveries(pool)
    assert [(d.event_type, d.loop_id) for d in rows] == [("loop.budget_exceeded", b.id)]


async def test_unsubscribed_and_removed_endpoints_get_no_deliveries(
    pool: Pool, secret: str
) -> None:
    settings = _settings("http://127.0.0.1:9/hook", ["loop.completed"])
    await WebhookDeliverer(settings, pool, worker_id=uuid.uuid4()).sync_config()
    async with connection(pool) as conn:
        row = await factories.loop(conn, status="running")
        await factories.set_loop(conn, row.id, status="stopped")  # not subscribed
    assert await _deliveries(pool) == []
    # A process whose config names no webhooks (a worker started without the file) leaves
    # the fleet's endpoints alone; an explicit empty list is what removes them.
    await WebhookDeliverer(fast_settings(), pool, worker_id=uuid.uuid4()).sync_config()
    async with connection(pool) as conn:
        (endpoint,) = await webhooks.list_endpoints(conn)
        assert endpoint.enabled is True
    await WebhookDeliverer(fast_settings(webhooks=[]), pool, worker_id=uuid.uuid4()).sync_config()
    async with connection(pool) as conn:
        (endpoint,) = await webhooks.list_endpoints(conn)
        assert endpoint.enabled is False
        row = await factories.loop(conn, status="running")
        await factories.set_loop(conn, row.id, status="completed")
    assert await _deliveries(pool) == []


async def test_a_missing_secret_stops_the_engine_at_start(
    pool: Pool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    settings = _settings("http://127.0.0.1:9/hook", ["loop.completed"])
    with pytest.raises(ConfigError, match=SECRET_ENV):
        async with running_engine(pool, database_url, AgentRegistry(), settings=settings):
            pass


async def test_a_live_lease_is_not_claimed_twice(pool: Pool, secret: str) -> None:
    settings = _settings("http://127.0.0.1:9/hook", ["loop.completed"])
    async with connection(pool) as conn:
        holder = await factories.worker(conn)
    d1 = WebhookDeliverer(settings, pool, worker_id=holder)
    await d1.sync_config()
    async with connection(pool) as conn:
        row = await factories.loop(conn, status="running")
        await factories.set_loop(conn, row.id, status="completed")
        ids = list(d1.targets)
        first = await webhooks.claim(
            conn,
            endpoint_ids=ids,
            lease_token=uuid.uuid4(),
            worker_id=holder,
            lease_seconds=30,
            limit=10,
        )
        second = await webhooks.claim(
            conn,
            endpoint_ids=ids,
            lease_token=uuid.uuid4(),
            worker_id=uuid.uuid4(),
            lease_seconds=30,
            limit=10,
        )
    assert len(first) == 1 and second == []


async def test_a_dead_workers_lease_is_taken_over_at_once(pool: Pool, secret: str) -> None:
    settings = _settings("http://127.0.0.1:9/hook", ["loop.completed"])
    async with connection(pool) as conn:
        dead = await factories.worker(conn, dead=True)
    d1 = WebhookDeliverer(settings, pool, worker_id=dead)
    await d1.sync_config()
    async with connection(pool) as conn:
        row = await factories.loop(conn, status="running")
        await factories.set_loop(conn, row.id, status="completed")
        ids = list(d1.targets)
        (first,) = await webhooks.claim(
            conn,
            endpoint_ids=ids,
            lease_token=uuid.uuid4(),
            worker_id=dead,
            lease_seconds=300,
            limit=10,
        )
        (again,) = await webhooks.claim(
            conn,
            endpoint_ids=ids,
            lease_token=uuid.uuid4(),
            worker_id=uuid.uuid4(),
            lease_seconds=300,
            limit=10,
        )
    assert again.id == first.id and again.message_id == first.message_id
    assert again.attempts == 2


async def test_a_secret_echoed_in_an_error_is_masked_in_the_signed_body(
    pool: Pool, secret: str
) -> None:
    async with WebhookReceiver(secret) as rx:
        settings = _settings(rx.url, ["loop.failed"])
        deliverer = WebhookDeliverer(settings, pool, worker_id=uuid.uuid4())
        await deliverer.sync_config()
        async with connection(pool) as conn:
            row = await factories.loop(conn, status="running")
            await factories.set_loop(
                conn,
                row.id,
                status="failed",
                error_message="401 from https://llm.example/v1?key=sk-live-abcdefgh12345",
            )
        deliverer.http = httpx.AsyncClient()
        try:
            assert (await deliverer.deliver_once()).delivered == 1
        finally:
            await deliverer.http.aclose()
    (only,) = rx.ids
    body = rx.first(only).body
    assert body is not None and "sk-live-abcdefgh12345" not in str(body)
    assert body["data"]["error_message"].startswith("401 from https://llm.example/v1?key=")


async def test_the_janitor_prunes_old_finished_deliveries_and_never_a_pending_one(
    pool: Pool, secret: str
) -> None:
    from agentd.engine.janitor import Janitor

    settings = _settings("http://127.0.0.1:9/hook", ["loop.completed"])
    await WebhookDeliverer(settings, pool, worker_id=uuid.uuid4()).sync_config()
    async with connection(pool) as conn:
        for _ in range(6):  # each completion queues one delivery (the 0013/0014 triggers)
            row = await factories.loop(conn, status="running")
            await factories.set_loop(conn, row.id, status="completed")
        ids = [d.id for d in reversed(await webhooks.list_(conn))]
        assert len(ids) == 6
        # delivered / failed / pending, each once 8 days old and once fresh
        ages = [("delivered", 8), ("failed", 8), ("pending", 8)]
        ages += [("delivered", 0), ("failed", 0), ("pending", 0)]
        for i, (status, days) in enumerate(ages):
            await conn.execute(
                "UPDATE webhook_deliveries SET status = $2,"
                " updated_at = now() - make_interval(days => $3) WHERE id = $1",
                ids[i],
                status,
                days,
            )
    janitor = Janitor(fast_settings(janitor_batch_size=1), pool)  # batches of one
    report = await janitor.prune_once()
    assert report.webhook_deliveries == 2
    async with connection(pool) as conn:
        left = {d.id: d.status for d in await webhooks.list_(conn)}
    assert sorted(left) == sorted(ids[2:])  # the old pending one stays
    assert (await janitor.prune_once()).webhook_deliveries == 0

    off = Janitor(fast_settings(webhook_delivery_retention="off"), pool)
    async with connection(pool) as conn:
        await conn.execute("UPDATE webhook_deliveries SET updated_at = now() - interval '30 days'")
    assert (await off.prune_once()).webhook_deliveries == 0


async def test_an_endpoint_answering_410_gone_is_disabled_not_retried(
    pool: Pool, secret: str
) -> None:
    """Standard Webhooks: 410 Gone asks the sender to stop. The delivery fails at once, the
    endpoint is disabled (its other deliveries fail, new ones are not queued, other
    processes stop claiming), a `webhook.endpoint_disabled` event says so; a worker that
    starts with it in its config enables it again."""
    async with WebhookReceiver(secret, answer=410) as rx:
        settings = _settings(rx.url, ["loop.paused"])
        deliverer = WebhookDeliverer(settings, pool, worker_id=uuid.uuid4())
        other = WebhookDeliverer(settings, pool, worker_id=uuid.uuid4())
        await deliverer.sync_config()
        await other.sync_config()
        async with connection(pool) as conn:
            for _ in range(3):
                row = await factories.loop(conn, status="running")
                await factories.set_loop(conn, row.id, status="paused")
        deliverer.http = httpx.AsyncClient()
        other.http = httpx.AsyncClient()
        try:
            # One attempt only: the first delivery claimed, the others wait for a later one.
            first = await deliverer.deliver_once()
            assert first.failed >= 1 and first.retried == 0 and first.delivered == 0
            assert deliverer.targets == {}
            assert not await other.deliver_once()  # another process claims nothing either
        finally:
            await deliverer.http.aclose()
            await other.http.aclose()
        attempts = len(rx.arrivals)
    assert attempts == first.failed  # each delivery was tried at most once
    rows = await _deliveries(pool)
    assert [d.status for d in rows] == ["failed"] * 3
    assert {d.last_status for d in rows if d.attempts} == {410}
    async with connection(pool) as conn:
        (endpoint,) = await webhooks.list_endpoints(conn)
        assert endpoint.enabled is False and endpoint.disabled_reason == "gone"
        row = await factories.loop(conn, status="running")
        await factories.set_loop(conn, row.id, status="paused")
        (event,) = await conn.fetch(
            "SELECT reason, status, url FROM events WHERE name = 'webhook.endpoint_disabled'"
        )
    assert (event["reason"], event["status"], event["url"]) == ("gone", 410, rx.url)
    assert len(await _deliveries(pool)) == 3  # nothing new is queued for it
    await WebhookDeliverer(settings, pool, worker_id=uuid.uuid4()).sync_config()
    async with connection(pool) as conn:
        (endpoint,) = await webhooks.list_endpoints(conn)
    assert endpoint.enabled is True and endpoint.disabled_reason is None


async def test_during_a_secret_rotation_receivers_on_either_secret_verify(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The env var holds the new and the old secret; every attempt is signed with both, and
    the official `standardwebhooks` library verifies it with either one."""
    new, old = new_secret(), new_secret()
    monkeypatch.setenv(SECRET_ENV, f"{new} {old}")
    for holder in (old, new):
        async with WebhookReceiver(holder) as rx:
            settings = _settings(rx.url, ["loop.paused"])
            deliverer = WebhookDeliverer(settings, pool, worker_id=uuid.uuid4())
            await deliverer.sync_config()
            async with connection(pool) as conn:
                row = await factories.loop(conn, status="running")
                await factories.set_loop(conn, row.id, status="paused")
            deliverer.http = httpx.AsyncClient()
            try:
                assert (await deliverer.deliver_once()).delivered == 1
            finally:
                await deliverer.http.aclose()
        (arrival,) = rx.arrivals
        assert arrival.verified
        assert len(arrival.headers["webhook-signature"].split(" ")) == 2

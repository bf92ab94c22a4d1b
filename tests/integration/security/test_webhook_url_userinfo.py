"""A webhook URL's userinfo password is used for delivery and shown nowhere.

Every face that shows an endpoint's or a delivery's URL (GET /v1/webhooks,
GET /v1/webhook-deliveries and one delivery, the admin webhooks page), to a read token and
to the operator, masks the password and keeps the user name; the receiver still gets the
credentials (HTTP Basic, from the URL).
"""

from __future__ import annotations

import base64
import re
import uuid

import httpx
import pytest
from pydantic import SecretStr

from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool, connection
from agentd.engine.webhooks import WebhookDeliverer
from agentd.settings import WebhookConfig
from agentd.testing import agents, factories
from agentd.testing.engine import fast_settings
from agentd.testing.webhook_receiver import WebhookReceiver, new_secret

SECRET_ENV = "AGENTD_TEST_USERINFO_SECRET"
TOKEN = "operator-token-for-userinfo-tests"
READ_TOKEN = "read-token-for-userinfo-tests"
PASSWORD = "hook-pa55word-Zq81"


async def test_the_password_is_masked_on_every_face_and_delivery_still_authenticates(
    pool: Pool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = new_secret()
    monkeypatch.setenv(SECRET_ENV, secret)
    async with WebhookReceiver(secret) as rx:
        url = rx.url.replace("http://", f"http://hookuser:{PASSWORD}@")
        hook = WebhookConfig(url=url, events=["loop.failed"], secret_env=SECRET_ENV)
        settings = fast_settings(webhooks=[hook], read_tokens=[SecretStr(READ_TOKEN)])
        deliverer = WebhookDeliverer(settings, pool, worker_id=uuid.uuid4())
        await deliverer.sync_config()
        async with connection(pool) as conn:
            row = await factories.loop(conn, status="running")
            await factories.set_loop(
                conn, row.id, status="failed", error_message=f"echo of {PASSWORD}"
            )
        deliverer.http = httpx.AsyncClient()
        try:
            assert (await deliverer.deliver_once()).delivered == 1
        finally:
            await deliverer.http.aclose()
        (only,) = rx.ids
        auth = rx.first(only).headers["authorization"]
        assert base64.b64decode(auth.removeprefix("Basic ")).decode() == f"hookuser:{PASSWORD}"
        state = AppState.create(
            settings=settings,
            pool=pool,
            registry=agents.registry(),
            database_url=database_url,
            api_token=TOKEN,
        )
        app = create_app(state)
        for token in (READ_TOKEN, TOKEN):
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://agentd.test",
                headers={"Authorization": f"Bearer {token}"},
            ) as api:
                for path in ("/v1/webhooks", "/v1/webhook-deliveries"):
                    r = await api.get(path)
                    assert r.status_code == 200, (path, r.text)
                    assert PASSWORD not in r.text, path
                    assert "hookuser:" in r.text, path
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://agentd.test",
                follow_redirects=True,
            ) as browser:
                login = await browser.get("/admin/login")
                nonce = re.search(r'name="nonce" value="([^"]+)"', login.text)
                assert nonce is not None
                await browser.post("/admin/login", data={"token": token, "nonce": nonce[1]})
                page = await browser.get("/admin/webhooks")
                assert page.status_code == 200 and "hookuser:" in page.text
                assert PASSWORD not in page.text

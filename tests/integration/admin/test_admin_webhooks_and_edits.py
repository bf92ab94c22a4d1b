"""The admin's approve-with-edits field and its webhooks page (deliveries, re-send)."""

from __future__ import annotations

import uuid

import pytest
from admin_kit import Browser

from agentd.api.state import AppState
from agentd.db.pool import Pool, connection
from agentd.engine.webhooks import WebhookDeliverer
from agentd.settings import WebhookConfig
from agentd.store import loops, tool_calls, webhooks
from agentd.testing import factories
from agentd.testing.agents import CALLS
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.fake_llm import ToolCall as FakeCall
from agentd.testing.webhook_receiver import new_secret


async def _parked(pool: Pool, loop_id: uuid.UUID) -> int | None:
    async with connection(pool) as conn:
        calls = await tool_calls.list_pending_approval(conn, loop_id=loop_id)
        lp = await loops.get(conn, loop_id=loop_id)
    return calls[0].id if calls and lp is not None and lp.status == "waiting" else None


async def test_approve_with_edited_arguments_from_the_loop_page(
    operator: Browser, app_state: AppState, pool: Pool, database_url: str, fake_llm: FakeLLM
) -> None:
    fake_llm.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[FakeCall("refund", {"amount": 50})]),
        )
    )
    fake_llm.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="ok")))
    loop = await app_state.lifecycle.start(
        agent="calc", message="refund", state={"llm": fake_llm.base_url}
    )
    async with running_engine(pool, database_url, app_state.registry):
        call = await eventually(lambda: _parked(pool, loop.id))
        page = (await operator.get(f"/admin/loops/{loop.id}")).text
        assert f'data-field="arguments-{call}"' in page and "Edit arguments" in page
        url = f"/admin/tool-calls/{call}/approve"
        bad = await operator.flash(await operator.post(url, {"arguments": "{nope"}))
        assert bad == "error: Arguments are not JSON."
        off = await operator.flash(await operator.post(url, {"arguments": '{"amount": "x"}'}))
        assert off.startswith("error: arguments for refund do not match its input schema")
        assert await _parked(pool, loop.id) == call  # still waiting, nothing changed
        ok = await operator.flash(await operator.post(url, {"arguments": '{"amount": 5}'}))
        assert ok == f"ok: Approved refund (call {call}) with edited arguments."

        async def done() -> bool:
            async with connection(pool) as conn:
                lp = await loops.get(conn, loop_id=loop.id)
            return lp is not None and lp.status == "completed"

        await eventually(done)
    assert [c["amount"] for c in CALLS] == [5]
    page = (await operator.get(f"/admin/loops/{loop.id}")).text
    assert "edited by a person" in page and "The model asked" in page


async def _delivery(pool: Pool, status: str = "completed") -> webhooks.Delivery:
    hook = WebhookConfig(
        url="http://127.0.0.1:9/hook?token=sekrit-in-url", events=["*"], secret_env="ADMIN_HOOK"
    )
    await WebhookDeliverer(
        fast_settings(webhooks=[hook]), pool, worker_id=uuid.uuid4()
    ).sync_config()
    async with connection(pool) as conn:
        row = await factories.loop(conn, status="running")
        await factories.set_loop(conn, row.id, status=status)
        (d,) = await webhooks.list_(conn)
    return d


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADMIN_HOOK", new_secret())


async def test_the_webhooks_page_lists_deliveries_and_re_sends_one(
    operator: Browser, pool: Pool
) -> None:
    empty = await operator.get("/admin/webhooks")
    assert empty.status_code == 200 and "No webhook endpoints" in empty.text
    d = await _delivery(pool)
    async with connection(pool) as conn:
        await conn.execute(
            "UPDATE webhook_deliveries SET status = 'failed', attempts = 10, "
            "last_error = 'HTTP 503: down' WHERE id = $1",
            d.id,
        )
    page = await operator.get("/admin/webhooks")
    assert page.status_code == 200
    assert "http://127.0.0.1:9/hook?token=" in page.text and "$ADMIN_HOOK" in page.text
    assert "sekrit-in-url" not in page.text
    assert d.message_id in page.text and "HTTP 503: down" in page.text
    assert f'data-action="resend-{d.id}"' in page.text
    filtered = await operator.get("/admin/webhooks?status=delivered")
    assert d.message_id not in filtered.text
    ok = await operator.flash(await operator.post(f"/admin/webhooks/deliveries/{d.id}/resend"))
    assert ok == f"ok: Delivery {d.id} queued again (webhook-id {d.message_id})."
    async with connection(pool) as conn:
        again = await webhooks.get(conn, delivery_id=d.id)
    assert again is not None and again.status == "pending" and again.message_id == d.message_id
    gone = await operator.flash(await operator.post("/admin/webhooks/deliveries/999999/resend"))
    assert gone == "error: Delivery 999999 does not exist."


async def test_a_reader_sees_deliveries_but_cannot_re_send(
    reader: Browser, operator: Browser, pool: Pool
) -> None:
    d = await _delivery(pool)
    page = await reader.get("/admin/webhooks")
    assert d.message_id in page.text and "resend-" not in page.text
    forged = await reader.post(f"/admin/webhooks/deliveries/{d.id}/resend")
    assert forged.status_code == 403
    no_csrf = await operator.client.post(f"/admin/webhooks/deliveries/{d.id}/resend")
    assert no_csrf.status_code == 403


async def test_the_state_tab_saves_an_edit_and_refuses_a_stale_one(
    operator: Browser, reader: Browser, pool: Pool
) -> None:
    async with connection(pool) as conn:
        lp = await factories.loop(conn, status="paused", state={"plan": "pro", "old": 1})
    page = (await operator.get(f"/admin/loops/{lp.id}?tab=state")).text
    assert 'data-action="save-state"' in page and 'name="version" value="1"' in page
    url = f"/admin/loops/{lp.id}/state"
    ok = await operator.flash(
        await operator.post(url, {"version": "1", "state": '{"plan": "enterprise"}'})
    )
    assert ok == "ok: State saved (version 2)."
    async with connection(pool) as conn:
        now = await loops.get(conn, loop_id=lp.id)
    assert now is not None and now.state == {"plan": "enterprise"} and now.state_version == 2
    stale = await operator.flash(await operator.post(url, {"version": "1", "state": "{}"}))
    assert stale == "error: The state changed since this page loaded; reload and edit again."
    bad = await operator.flash(await operator.post(url, {"version": "2", "state": "[1]"}))
    assert bad == "error: State must be a JSON object."
    same = await operator.flash(
        await operator.post(url, {"version": "2", "state": '{"plan": "enterprise"}'})
    )
    assert same == "ok: Nothing changed."
    assert (
        'data-action="save-state"' not in (await reader.get(f"/admin/loops/{lp.id}?tab=state")).text
    )
    assert (await reader.post(url, {"version": "2", "state": "{}"})).status_code == 403


async def test_the_state_tab_is_read_only_while_a_turn_runs(operator: Browser, pool: Pool) -> None:
    async with connection(pool) as conn:
        lp = await factories.loop(conn, status="running", state={"a": 1})
    page = (await operator.get(f"/admin/loops/{lp.id}?tab=state")).text
    assert 'data-action="save-state"' not in page and "Editable while the loop is at rest" in page
    busy = await operator.flash(
        await operator.post(f"/admin/loops/{lp.id}/state", {"version": "1", "state": "{}"})
    )
    assert busy.startswith("error: loop") and "running" in busy

"""Every loop action from the admin: start, pause, resume, stop, freeze, unfreeze, observe,
continue, approve, deny. A refused transition is a flash message, never an error page."""

from __future__ import annotations

import uuid

from admin_kit import Browser

from agentd.api.state import AppState
from agentd.db.pool import Pool, connection
from agentd.store import loop_inputs, loops, tool_calls
from agentd.store.models import Loop
from agentd.testing.agents import CALLS
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.fake_llm import ToolCall as FakeCall


async def row(pool: Pool, loop_id: uuid.UUID) -> Loop:
    async with connection(pool) as conn:
        found = await loops.get(conn, loop_id=loop_id)
    assert found is not None
    return found


async def test_start_a_loop_from_the_form(operator: Browser, pool: Pool) -> None:
    r = await operator.post(
        "/admin/loops",
        {
            "agent": "calc",
            "message": "hi",
            "subject": "s-1",
            "title": "T",
            "state": '{"llm": "http://127.0.0.1:9"}',
            "observe": "1",
        },
    )
    assert await operator.flash(r) == "ok: Started a calc loop."
    loop_id = uuid.UUID(r.headers["location"].rsplit("/", 1)[1])
    started = await row(pool, loop_id)
    assert (started.subject, started.title, started.observed) == ("s-1", "T", True)
    assert started.state == {"llm": "http://127.0.0.1:9"}


async def test_a_bad_start_form_is_a_flash_and_starts_nothing(
    operator: Browser, pool: Pool
) -> None:
    for data, message in [
        ({"agent": "ghost", "message": "hi"}, "unknown agent 'ghost'"),
        ({"agent": "calc", "message": "  "}, "message must be a non-empty string"),
        ({"agent": "calc", "message": "hi", "state": "{nope"}, "state is not valid JSON"),
        ({"agent": "calc", "message": "hi", "state": "[1]"}, "state must be an object"),
        ({}, "unknown agent"),
    ]:
        flash = await operator.flash(await operator.post("/admin/loops", data))
        assert flash.startswith("error: ") and message in flash, flash
    async with connection(pool) as conn:
        assert await conn.fetchval("SELECT count(*) FROM loops") == 0


async def test_each_lifecycle_action_works_and_a_refused_one_is_a_flash(
    operator: Browser, app_state: AppState, pool: Pool
) -> None:
    loop = await app_state.lifecycle.start(agent="calc", message="hi")
    base = f"/admin/loops/{loop.id}/actions"

    async def act(action: str, **data: str) -> str:
        return await operator.flash(await operator.post(f"{base}/{action}", data))

    assert await act("observe") == "ok: Observing: turns stream live."
    assert (await row(pool, loop.id)).observed
    assert await act("unobserve") == "ok: No longer observed."
    assert not (await row(pool, loop.id)).observed
    assert (await act("freeze")).startswith("ok: Frozen")
    assert (await row(pool, loop.id)).frozen
    assert await act("unfreeze") == "ok: Unfrozen."
    assert not (await row(pool, loop.id)).frozen
    assert (await act("resume")).startswith("error: loop is queued; resume allowed from")
    assert await act("pause") == "ok: Paused."
    assert (await row(pool, loop.id)).status == "paused"
    assert await act("resume", **{"from": "paused"}) == "ok: Resumed."
    assert (await row(pool, loop.id)).status == "queued"
    assert (await act("resume", **{"from": "queued"})).startswith("error: status(es)")
    assert await act("stop") == "ok: Stopped."
    assert (await row(pool, loop.id)).status == "stopped"
    assert (await act("pause")).startswith("error: cannot pause a stopped loop")
    assert await act("explode") == "error: Unknown action 'explode'."
    missing = await operator.flash(
        await operator.post(f"/admin/loops/{uuid.uuid4()}/actions/pause")
    )
    assert missing.startswith("error: no loop")
    assert (await operator.flash(await operator.post("/admin/loops/xyz/actions/pause"))).startswith(
        "error: No loop"
    )


async def test_continue_a_loop_at_rest_with_a_message(
    operator: Browser, app_state: AppState, pool: Pool
) -> None:
    loop = await app_state.lifecycle.start(agent="calc", message="hi")
    url = f"/admin/loops/{loop.id}/messages"
    busy = await operator.flash(await operator.post(url, {"content": "more"}))
    assert busy == "ok: Message queued; the loop continues with it when the current run ends."
    inject = await operator.flash(await operator.post(url, {"content": "x", "mode": "inject"}))
    assert inject == "ok: Message queued; the model sees it when its next turn starts."
    bad = await operator.flash(await operator.post(url, {"content": "x", "mode": "shout"}))
    assert bad == "error: Unknown mode 'shout'."
    await app_state.lifecycle.pause(loop.id)
    empty = await operator.flash(await operator.post(url, {"content": " "}))
    assert empty == "error: content must be a non-empty string"
    ok = await operator.flash(await operator.post(url, {"content": "and then?"}))
    assert ok == "ok: Message added; the loop continues."
    assert (await row(pool, loop.id)).status == "queued"
    page = (await operator.get(f"/admin/loops/{loop.id}")).text
    assert "and then?" in page and 'name="mode"' in page
    async with connection(pool) as conn:
        sent = await loop_inputs.list_(conn, loop_id=loop.id)
    # the paused loop took the earlier two first, in the order they were sent
    assert [(i.content, i.status, i.sent_by) for i in sent] == [
        ("more", "applied", "admin:operator"),
        ("x", "applied", "admin:operator"),
        ("and then?", "applied", "admin:operator"),
    ]
    no_csrf = await operator.client.post(url, data={"content": "sneaky", "csrf": "forged"})
    assert no_csrf.status_code == 403
    async with connection(pool) as conn:
        assert len(await loop_inputs.list_(conn, loop_id=loop.id)) == 3


def script_refund(fake: FakeLLM) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[FakeCall("refund", {"amount": 5})]),
        )
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="all done")))


async def test_approve_and_deny_parked_tool_calls(
    operator: Browser, app_state: AppState, pool: Pool, database_url: str, fake_llm: FakeLLM
) -> None:
    script_refund(fake_llm)
    state = {"llm": fake_llm.base_url}
    first = await app_state.lifecycle.start(agent="calc", message="refund", state=state)
    second = await app_state.lifecycle.start(agent="calc", message="refund", state=state)
    async with running_engine(pool, database_url, app_state.registry):

        async def parked(loop_id: uuid.UUID) -> int | None:
            async with connection(pool) as conn:
                calls = await tool_calls.list_pending_approval(conn, loop_id=loop_id)
            return calls[0].id if calls and (await row(pool, loop_id)).status == "waiting" else None

        a = await eventually(lambda: parked(first.id))
        b = await eventually(lambda: parked(second.id))
        page = (await operator.get(f"/admin/loops/{first.id}")).text
        assert "Waiting for a decision" in page and f'data-action="approve-{a}"' in page

        ok = await operator.flash(await operator.post(f"/admin/tool-calls/{a}/approve"))
        assert ok == f"ok: Approved refund (call {a})."
        no = await operator.flash(
            await operator.post(f"/admin/tool-calls/{b}/deny", {"reason": "too much"})
        )
        assert no == f"ok: Denied refund (call {b})."

        async def completed() -> bool:
            return all([(await row(pool, i)).status == "completed" for i in (first.id, second.id)])

        await eventually(completed)
    assert [c["amount"] for c in CALLS if c["tool"] == "refund"] == [5]
    again = await operator.flash(await operator.post(f"/admin/tool-calls/{a}/approve"))
    assert again.startswith("ok: Approved")  # repeating a decision is harmless
    flipped = await operator.flash(await operator.post(f"/admin/tool-calls/{a}/deny"))
    assert flipped.startswith("error: tool call") and "approved" in flipped
    page = (await operator.get(f"/admin/loops/{second.id}")).text
    assert "too much" in page and "denied by admin" in page
    for bad in ("999999", "abc", "9" * 30):
        gone = await operator.flash(await operator.post(f"/admin/tool-calls/{bad}/approve"))
        assert gone.startswith("error: No tool call")


async def test_the_page_of_a_loop_shows_its_actions_by_status(
    operator: Browser, app_state: AppState
) -> None:
    loop = await app_state.lifecycle.start(agent="calc", message="hi")
    page = (await operator.get(f"/admin/loops/{loop.id}")).text
    assert 'data-action="pause"' in page and 'data-action="stop"' in page
    assert 'data-action="resume"' not in page
    await app_state.lifecycle.stop(loop.id)
    page = (await operator.get(f"/admin/loops/{loop.id}")).text
    assert 'data-action="resume"' in page and 'data-action="stop"' not in page

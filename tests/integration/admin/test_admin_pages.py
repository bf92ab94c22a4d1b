"""Every admin page renders, empty and full; the loops list filters, searches and pages."""

from __future__ import annotations

import json
import re
import uuid

from admin_kit import Browser

from agentd.api.state import AppState
from agentd.db.pool import Pool, connection, transaction
from agentd.store import events, mcp
from agentd.store.models import NewEvent
from agentd.testing import factories
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.fake_llm import ToolCall as FakeCall

PAGES = ["/admin", "/admin/", "/admin/loops", "/admin/mcp", "/admin/mcp/inbound"]


async def test_every_page_renders_on_an_empty_database(operator: Browser) -> None:
    for url in [*PAGES, "/admin/mcp?agent=calc", "/admin/mcp?agent=calc&server=calc"]:
        r = await operator.get(url)
        assert r.status_code == 200, url
        assert "text/html" in r.headers["content-type"]
        assert r.headers["cache-control"] == "no-store"
    assert "No loops yet" in (await operator.get("/admin/loops")).text
    assert "No workers are running" in (await operator.get("/admin")).text


async def test_every_page_renders_a_finished_loop_with_tools_events_and_failures(
    operator: Browser, app_state: AppState, pool: Pool, database_url: str, fake_llm: FakeLLM
) -> None:
    fake_llm.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(reasoning="adding up", tool_calls=[FakeCall("add", {"a": 2, "b": 3})]),
        )
    )
    fake_llm.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="It is 5.")))
    loop = await app_state.lifecycle.start(
        agent="calc",
        message="2+3?",
        subject="ticket-7",
        title="Sum <b>please</b>",
        state={"llm": fake_llm.base_url},
    )
    async with running_engine(pool, database_url, app_state.registry) as engine:

        async def done() -> bool:
            page = await operator.get(f"/admin/loops/{loop.id}/live")
            return "status-completed" in page.text

        await eventually(done)
        dashboard = await operator.get("/admin")
        assert str(engine.worker_id)[:8] in dashboard.text
    async with transaction(pool) as conn:
        failed = await factories.loop(conn, status="failed")
        await events.insert_many(
            conn,
            [NewEvent(name="loop.failed", loop_id=failed.id, reason="turn_failed", log="boom")],
        )
        inbound = await mcp.insert_inbound(
            conn, server_name="calc", session_id="sess-1", principal="alice", protocol_version="x"
        )
        assert inbound is not None
        await events.insert_many(
            conn,
            [
                NewEvent(
                    name="mcp_inbound.tools/call",
                    inbound_session_id=inbound["id"],
                    request_data={"body": '{"jsonrpc": "2.0"}'},
                )
            ],
        )

    page = (await operator.get(f"/admin/loops/{loop.id}")).text
    assert "Sum &lt;b&gt;please&lt;/b&gt;" in page  # escaped, always
    assert "adding up" in page and "It is 5." in page and "ticket-7" in page
    assert re.search(r"&#34;a&#34;: 2,\s+&#34;b&#34;: 3", page)  # the call's arguments, pretty
    assert re.search(r"<pre[^>]*>5</pre>", page)  # its result
    events_tab = (await operator.get(f"/admin/loops/{loop.id}?tab=events")).text
    assert "llm.request" in events_tab and "turn.completed" in events_tab
    mcp_tab = (await operator.get(f"/admin/loops/{loop.id}?tab=mcp")).text
    assert "refund" in mcp_tab and "needs approval" in mcp_tab and "local" in mcp_tab
    state_tab = (await operator.get(f"/admin/loops/{loop.id}?tab=state")).text
    assert fake_llm.base_url in state_tab
    dashboard = (await operator.get("/admin")).text
    assert "turn_failed" in dashboard and "boom" in dashboard
    assert re.search(r'stat-n">1</span>\s*<span class="stat-label">completed', dashboard)
    inbound_list = (await operator.get("/admin/mcp/inbound")).text
    assert "sess-1" in inbound_list and "alice" in inbound_list
    detail = await operator.get(f"/admin/mcp/inbound/{inbound['id']}")
    assert detail.status_code == 200 and "mcp_inbound.tools/call" in detail.text
    failed_page = (await operator.get(f"/admin/loops/{failed.id}")).text
    assert "status-failed" in failed_page


async def test_the_loops_list_filters_searches_and_pages_without_repeats(
    operator: Browser, pool: Pool
) -> None:
    async with transaction(pool) as conn:
        made = []
        for i in range(120):
            row = await factories.loop(
                conn, status="completed" if i % 3 else "paused", agent="calc"
            )
            made.append(row)
        await conn.execute("UPDATE loops SET subject = 'acme-' || id::text WHERE status = 'paused'")
        special = await factories.loop(conn, status="failed", agent="calc_seq")
        await conn.execute("UPDATE loops SET title = '100% _done_' WHERE id = $1", special.id)

    seen: list[str] = []
    url: str | None = "/admin/loops"
    while url:
        page = (await operator.get(url)).text
        seen += re.findall(r'href="/admin/loops/([0-9a-f-]{36})" class="loop-link"', page)
        m = re.search(r'href="(/admin/loops\?[^"]*cursor=[^"]+)"', page)
        url = m.group(1).replace("&amp;", "&") if m else None
    assert len(seen) == 121 == len(set(seen))

    def ids(page: str) -> set[str]:
        return set(re.findall(r'href="/admin/loops/([0-9a-f-]{36})" class="loop-link"', page))

    paused = ids((await operator.get("/admin/loops?status=paused")).text)
    assert len(paused) == 40
    assert ids((await operator.get("/admin/loops?agent=calc_seq")).text) == {str(special.id)}
    assert len(ids((await operator.get("/admin/loops?q=acme")).text)) == 40
    assert ids((await operator.get("/admin/loops?q=100%25 _done")).text) == {str(special.id)}
    assert ids((await operator.get("/admin/loops?q=1%250")).text) == set()  # % is literal
    prefix = str(made[5].id)[:13]
    assert str(made[5].id) in ids((await operator.get(f"/admin/loops?q={prefix}")).text)
    exact = await operator.get(f"/admin/loops?q={made[7].id}")
    assert exact.status_code == 303 and exact.headers["location"].endswith(str(made[7].id))
    chips = (await operator.get("/admin/loops")).text
    assert re.search(r"paused <b>40</b>", chips)


async def test_bad_input_is_a_message_or_a_404_never_a_500(operator: Browser, pool: Pool) -> None:
    for url, status, text in [
        ("/admin/loops?status=nope", 200, "unknown status"),
        ("/admin/loops?cursor=garbage", 200, "page link is broken"),
        ("/admin/loops?cursor=2024-01-01T00:00:00~nope", 200, "page link is broken"),
        ("/admin/loops?q=" + "x" * 5000, 200, "No loops match"),
        ("/admin/loops?agent=ghost", 200, "No loops match"),
        ("/admin/loops/not-a-uuid", 404, "No loop"),
        (f"/admin/loops/{uuid.uuid4()}", 404, "No loop"),
        (f"/admin/loops/{uuid.uuid4()}/live", 404, "No loop"),
        (f"/admin/loops/{uuid.uuid4()}/stream", 404, "No loop"),
        ("/admin/mcp/inbound/abc", 404, "No inbound session"),
        ("/admin/mcp/inbound/99999999999999999999", 404, "No inbound session"),
        ("/admin/mcp/inbound/42", 404, "No inbound session"),
        ("/admin/mcp/inbound?before=zzz", 200, "No inbound MCP sessions"),
        ("/admin/mcp?agent=ghost", 200, "unknown agent"),
        ("/admin/mcp?agent=calc&server=ghost", 200, "no MCP server"),
        ("/admin/mcp?loop=not-a-uuid&agent=calc", 200, "add"),
    ]:
        r = await operator.get(url)
        assert r.status_code == status, url
        assert text in r.text, url
    async with transaction(pool) as conn:
        row = await factories.loop(conn, status="completed")
    for tab in ("nope", "events&after=abc", "events&after=99999999999999999999999"):
        r = await operator.get(f"/admin/loops/{row.id}?tab={tab}")
        assert r.status_code == 200, tab
    async with connection(pool) as conn:
        assert await conn.fetchval("SELECT count(*) FROM loops") == 1


async def test_the_live_fragment_is_the_changing_part_of_the_page(
    operator: Browser, app_state: AppState
) -> None:
    loop = await app_state.lifecycle.start(agent="calc", message="hello <script>")
    r = await operator.get(f"/admin/loops/{loop.id}/live")
    assert r.status_code == 200
    assert "<html" not in r.text and "status-queued" in r.text
    assert "hello &lt;script&gt;" in r.text
    assert json.dumps(str(loop.id))[1:-1] in r.text

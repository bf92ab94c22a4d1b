"""The loop page shows crash recovery truthfully and viewing a loop changes nothing in it."""

from __future__ import annotations

import uuid

import httpx
from admin_kit import TOKEN, Browser
from fastapi import FastAPI

from agentd.db.pool import Pool, connection, transaction
from agentd.engine.reaper import Reaper
from agentd.store import loops
from agentd.testing import factories
from agentd.testing.engine import fast_settings


async def test_a_reclaimed_tool_call_shows_its_reclaim_and_a_clean_one_shows_none(
    operator: Browser, pool: Pool
) -> None:
    async with transaction(pool) as conn:
        dead = await factories.worker(conn, dead=True)
        loop = await factories.loop(conn, status="running")
        crashed = await factories.tool_call(
            conn,
            loop,
            name="find_hotels",
            status="running",
            lease_token=uuid.uuid4(),
            leased_in=600,
            lease_worker_id=dead,
        )
        await factories.tool_call(conn, loop, name="add", executed=True, responded=True)
    await Reaper(fast_settings(), pool).liveness_once()
    page = (await operator.get(f"/admin/loops/{loop.id}")).text
    assert "Crash recovery" in page
    assert f"tool call {crashed.id} reclaimed: its worker died" in page
    assert page.count("↻ reclaimed") == 1  # on find_hotels only, not on add


async def test_viewing_a_finished_loop_writes_nothing(
    app: FastAPI, live_server, pool: Pool
) -> None:  # type: ignore[no-untyped-def]
    async with transaction(pool) as conn:
        done = await factories.loop(conn, status="completed")
    async with (
        live_server(app) as base,
        httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        ) as c,
    ):
        for url in (
            f"/admin/loops/{done.id}",
            f"/admin/loops/{done.id}/live",
            f"/admin/loops/{done.id}?tab=events",
        ):
            assert (await c.get(url)).status_code == 200, url
        async with c.stream("GET", f"/admin/loops/{done.id}/stream") as r:
            assert r.status_code == 200  # the page's live feed opened, then closed
    async with connection(pool) as conn:
        after = await loops.get(conn, loop_id=done.id)
    assert after is not None
    assert after.observed is False and after.updated_at == done.updated_at

"""The admin UI in a real headless Chromium: log in, start a loop, watch it stream, approve
its refund, see it complete, run a tool in the Inspector. Screenshots of the main pages go
to test-artifacts/screenshots/.

Needs Debian's chromium (`apt-get install chromium`) and the `playwright` package; the
browser Playwright downloads itself is not used (`executable_path`), so `playwright
install` is not needed. Skipped, saying why, when either is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fastapi import FastAPI

import agentd.admin
from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool
from agentd.testing import agents
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.fake_llm import ToolCall as FakeCall

playwright_api = pytest.importorskip(
    "playwright.async_api", reason="the playwright package is not installed"
)

CHROMIUM = os.environ.get("AGENTD_TEST_CHROMIUM") or shutil.which("chromium") or ""
if not CHROMIUM or not Path(CHROMIUM).exists():
    pytest.skip(
        "no chromium binary (apt-get install chromium, or set AGENTD_TEST_CHROMIUM)",
        allow_module_level=True,
    )

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "operator-token-for-the-browser-test"
SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
THINKING = (
    "Let me look at this request. The customer asks for a refund of 5, which is within "
    "policy, so I will issue it with the refund tool; a person approves refunds first. "
)


@contextlib.asynccontextmanager
async def serve(app: FastAPI) -> AsyncIterator[str]:
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[no-untyped-def,override]
            yield

    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_config=None, access_log=False, lifespan="on"
    )
    server = Server(config)
    task = asyncio.create_task(server.serve())

    async def started() -> bool:
        return bool(server.started)

    await eventually(started, within=10)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=10)


def script(fake: FakeLLM) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(
                content=THINKING * 2,
                reasoning="The amount is small; policy allows it.",
                tool_calls=[FakeCall("refund", {"amount": 5})],
                chunk_size=4,
                chunk_delay=0.02,
            ),
        )
    )
    fake.add(
        Rule(
            match=lambda last: last.role == "tool",
            reply=Reply(
                content="Done: the refund of 5 went through. Anything else I can do?",
                chunk_size=4,
                chunk_delay=0.02,
            ),
        )
    )


async def test_operator_starts_watches_approves_and_inspects_in_a_real_browser(
    pool: Pool, database_url: str
) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    registry = agents.registry()
    settings = fast_settings()
    state = AppState.create(
        settings=settings,
        pool=pool,
        registry=registry,
        database_url=database_url,
        api_token=TOKEN,
    )
    app = create_app(state)
    agentd.admin.mount(app, state)
    agents.CALLS.clear()

    async with (
        FakeLLM() as fake,
        running_engine(pool, database_url, registry, settings=settings),
        serve(app) as base,
        playwright_api.async_playwright() as pw,
    ):
        script(fake)
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1360, "height": 900})
            page.set_default_timeout(20_000)

            # Log in: any admin page sends a browser to the login form first.
            await page.goto(f"{base}/admin/loops")
            assert "/admin/login" in page.url
            await page.screenshot(path=str(SHOTS / "login.png"))
            await page.fill("#token", TOKEN)
            await page.click("button[type=submit]")
            await page.wait_for_url(f"{base}/admin/loops")
            cookies = {c["name"]: c for c in await page.context.cookies()}
            assert cookies["agentd_admin"]["httpOnly"]
            assert cookies["agentd_admin"]["sameSite"] == "Strict"
            assert TOKEN not in cookies["agentd_admin"]["value"]

            # Start a loop from the loops page.
            await page.click("[data-toggle=start-form]")
            await page.select_option("select[name=agent]", "calc")
            await page.fill("input[name=subject]", "customer-42")
            await page.fill("input[name=title]", "Refund request")
            await page.fill("textarea[name=message]", "Please refund 5 to customer 42.")
            await page.click("summary:has-text('Loop state')")
            await page.fill(
                "textarea[name=state]", json.dumps({"llm": fake.base_url, "stream": True})
            )
            await page.click("#start-form button[type=submit]")
            await page.wait_for_url("**/admin/loops/*")
            loop_url = page.url

            # It streams: deltas arrive over SSE into a live bubble.
            await page.wait_for_function(
                "() => Number(document.getElementById('live').dataset.deltas || 0) > 3"
            )
            live_text = await page.text_content("[data-live-message] .live-text")
            assert live_text and live_text.startswith("Let me look")
            await page.screenshot(path=str(SHOTS / "loop-streaming.png"), full_page=True)

            # The refund parks for a decision; approve it.
            approve = page.locator("button[data-action^=approve-]").first
            await approve.wait_for()
            assert await page.locator("#live .status-waiting").count() == 1
            await page.click("details.reasoning summary")
            await page.screenshot(path=str(SHOTS / "loop-approval.png"), full_page=True)
            await approve.click()
            await page.wait_for_url(loop_url)
            assert "Approved refund" in (await page.text_content(".flash")) or ""

            # The tool runs, the second turn streams, the loop completes.
            await page.locator("#live .status-completed").wait_for()
            await page.locator("text=the refund of 5 went through").first.wait_for()
            assert [c["tool"] for c in agents.CALLS] == ["refund"]
            assert await page.locator(".toolcall pre:has-text('refunded 5')").count() == 1
            await page.screenshot(path=str(SHOTS / "loop.png"), full_page=True)

            await page.click(".tabs a:has-text('Events')")
            await page.locator(".event-name:has-text('llm.request')").first.click()
            await page.screenshot(path=str(SHOTS / "loop-events.png"), full_page=True)

            await page.goto(f"{base}/admin/loops")
            await page.locator("a.loop-link:has-text('Refund request')").wait_for()
            await page.screenshot(path=str(SHOTS / "loops.png"), full_page=True)

            await page.goto(f"{base}/admin")
            await page.locator(".stat-completed .stat-n:has-text('1')").wait_for()
            await page.screenshot(path=str(SHOTS / "dashboard.png"), full_page=True)

            # The Inspector lists the agent's tools and runs one for real.
            await page.goto(f"{base}/admin/mcp?agent=calc")
            await page.fill(
                "form.run:has(input[name=tool][value=add]) textarea", '{"a": 2, "b": 40}'
            )
            await page.click("button[data-action=run-add]")
            await page.locator("#inspector-result:has-text('42')").wait_for()
            await page.screenshot(path=str(SHOTS / "inspector.png"), full_page=True)

            # Logging out ends the session.
            await page.click("form[action='/admin/logout'] button")
            await page.wait_for_url("**/admin/login")
            await page.goto(f"{base}/admin")
            assert "/admin/login" in page.url
        finally:
            await browser.close()

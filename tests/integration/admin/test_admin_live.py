"""The loop page's live stream: one shared LISTEN, deltas and refreshes over SSE."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
from admin_kit import TOKEN
from fastapi import FastAPI

from agentd.admin import live
from agentd.api.state import AppState
from agentd.db.pool import Pool
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule


async def sse(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, object]]]:
    event = None
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: ") and event:
            yield event, json.loads(line[6:])
            event = None


async def test_two_pages_share_one_listener_and_see_status_changes(
    app: FastAPI, app_state: AppState, live_server
) -> None:  # type: ignore[no-untyped-def]
    loop = await app_state.lifecycle.start(agent="calc", message="hi")
    hub: live.Hub = app.state.admin_hub
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with live_server(app) as base, httpx.AsyncClient(base_url=base, headers=headers) as c:
        url = f"/admin/loops/{loop.id}/stream"
        async with c.stream("GET", url) as one, c.stream("GET", url) as two:
            assert one.headers["content-type"].startswith("text/event-stream")
            first, second = sse(one), sse(two)
            assert await anext(first) == ("refresh", {"reason": "connected"})
            assert (await anext(second))[0] == "refresh"
            assert hub.subscribers == 2 and hub.listening
            await app_state.lifecycle.pause(loop.id)
            for stream in (first, second):
                event, data = await asyncio.wait_for(anext(stream), 10)
                if data["reason"] == "resync":  # the listener's first connect, harmless
                    event, data = await asyncio.wait_for(anext(stream), 10)
                assert (event, data["status"]) == ("refresh", "paused")
        await eventually(lambda: _idle(hub))


async def _idle(hub: live.Hub) -> bool:
    return hub.subscribers == 0 and not hub.listening


async def test_a_streamed_turn_arrives_as_deltas(
    app: FastAPI, app_state: AppState, pool: Pool, database_url: str, live_server, fake_llm: FakeLLM
) -> None:  # type: ignore[no-untyped-def]
    text = "streaming " * 30
    fake_llm.add(Rule(reply=Reply(content=text, chunk_size=5, chunk_delay=0.01)))
    loop = await app_state.lifecycle.start(
        agent="calc", message="go", state={"llm": fake_llm.base_url, "stream": True}
    )
    await app_state.lifecycle.freeze(loop.id)  # hold it until the page listens
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        running_engine(pool, database_url, app_state.registry),
        live_server(app) as base,
        httpx.AsyncClient(base_url=base, headers=headers) as c,
        c.stream("GET", f"/admin/loops/{loop.id}/stream") as r,
    ):
        events = sse(r)
        assert (await anext(events))[0] == "refresh"
        await app_state.lifecycle.unfreeze(loop.id)  # the page observes the loop now
        got = ""
        while True:
            event, data = await asyncio.wait_for(anext(events), 10)
            if event == "delta":
                got += str(data["delta"])
            elif data.get("status") == "completed":
                break
        # Deltas carry the text as it streams; the committed message (a refresh) has it all.
        assert len(got) > len(text) // 2 and text.startswith(got)


async def test_a_page_opened_mid_turn_gets_the_text_so_far_then_deltas_in_place(
    app: FastAPI, app_state: AppState, pool: Pool, database_url: str, live_server, fake_llm: FakeLLM
) -> None:  # type: ignore[no-untyped-def]
    text = "Let me look at the numbers first. " * 8
    fake_llm.add(Rule(reply=Reply(content=text, chunk_size=4, chunk_delay=0.03)))
    loop = await app_state.lifecycle.start(
        agent="calc", message="go", state={"llm": fake_llm.base_url, "stream": True}
    )
    await app_state.lifecycle.observe(loop.id, True)  # another page is already watching

    async def mid_stream() -> bool:
        saved = await pool.fetchval(
            "SELECT content FROM messages WHERE loop_id = $1 AND status = 'processing'", loop.id
        )
        return bool(saved) and len(saved) >= 12

    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        running_engine(pool, database_url, app_state.registry),
        live_server(app) as base,
        httpx.AsyncClient(base_url=base, headers=headers) as c,
    ):
        await eventually(mid_stream)
        async with c.stream("GET", f"/admin/loops/{loop.id}/stream") as r:
            events = sse(r)
            assert (await anext(events))[0] == "refresh"
            deltas: list[dict[str, object]] = []
            while True:
                event, data = await asyncio.wait_for(anext(events), 10)
                if event == "delta":
                    deltas.append(data)
                elif data.get("status") == "completed":
                    break
    assert deltas and deltas[0]["offset"] == 0 and len(str(deltas[0]["delta"])) >= 12
    position = 0
    for d in deltas:
        assert d["offset"] == position, deltas
        position += len(str(d["delta"]))
    assert text.startswith("".join(str(d["delta"]) for d in deltas))

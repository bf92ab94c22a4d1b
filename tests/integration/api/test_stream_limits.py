"""Streams cannot starve the API or the worker: each token holds a bounded number of them
open (429 with Retry-After beyond), and what they read from the database is shared per loop,
not repeated per stream (issue 42)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from agentd.settings import Settings
from agentd.store import loops, messages
from agentd.testing.engine import eventually, fast_settings

TOKEN = "operator-token-for-tests"
READ_TOKEN = "read-only-token-for-tests"


@pytest.fixture
def settings() -> Settings:
    return fast_settings(read_tokens=[READ_TOKEN], max_streams_per_token=3)


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextlib.asynccontextmanager
async def held_stream(
    http: httpx.AsyncClient,
    lid: str,
    token: str,
    seen: list[str] | None = None,
    protocol: str = "agentd",
) -> AsyncIterator[httpx.Response]:
    """An open stream (its first frame read); `seen` collects the rest of its lines."""
    url = f"/v1/loops/{lid}/stream?protocol={protocol}"
    async with http.stream("GET", url, headers=_auth(token)) as r:
        if r.status_code != 200:
            await r.aread()
            yield r
            return
        lines = r.aiter_lines()
        async for line in lines:
            if line.startswith("data:"):
                break

        async def rest() -> None:
            async for line in lines:
                if seen is not None:
                    seen.append(line)

        task = asyncio.create_task(rest())
        try:
            yield r
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


async def test_a_token_over_its_stream_limit_gets_429_with_retry_after(
    app: FastAPI, live_server, client: httpx.AsyncClient
) -> None:  # type: ignore[no-untyped-def]
    lid = (await client.post("/v1/loops", json={"agent": "calc", "message": "hi"})).json()["id"]
    async with (
        live_server(app) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as http,
        contextlib.AsyncExitStack() as stack,
    ):
        for _ in range(3):  # the loop stays queued (no worker): the streams stay open
            r = await stack.enter_async_context(held_stream(http, lid, READ_TOKEN))
            assert r.status_code == 200
        r = await http.get(f"/v1/loops/{lid}/stream", headers=_auth(READ_TOKEN))
        assert r.status_code == 429
        assert r.headers["retry-after"] == "5"
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"].endswith("/too-many-streams")
        assert "AGENTD_MAX_STREAMS_PER_TOKEN" in r.json()["detail"]
        r = await http.get(f"/v1/loops/{lid}/stream?protocol=ag-ui", headers=_auth(READ_TOKEN))
        assert r.status_code == 429  # AG-UI streams count too
        # Another token has its own slots; plain reads are never limited.
        async with held_stream(http, lid, TOKEN) as other:
            assert other.status_code == 200
        assert (await http.get(f"/v1/loops/{lid}", headers=_auth(READ_TOKEN))).status_code == 200
        await stack.aclose()  # the three hang up: their slots come back

        async def slot_free() -> bool:
            return (
                app.state.stream_slots.held(app.state.stream_slots.key(f"Bearer {READ_TOKEN}")) == 0
            )

        await eventually(slot_free)
        async with held_stream(http, lid, READ_TOKEN) as again:
            assert again.status_code == 200
    # A refused or 404 stream holds no slot.
    r = await client.get(f"/v1/loops/{'0' * 8}-0000-0000-0000-{'0' * 12}/stream")
    assert r.status_code == 404
    assert app.state.stream_slots.held(app.state.stream_slots.key(f"Bearer {TOKEN}")) == 0


@pytest.mark.parametrize("protocol", ["agentd", "ag-ui"])
async def test_many_streams_of_a_loop_share_its_database_reads(
    app: FastAPI,
    live_server,
    client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
    protocol: str,
) -> None:  # type: ignore[no-untyped-def]
    app.state.stream_slots.limit = 1000
    n = 40
    lid = (await client.post("/v1/loops", json={"agent": "calc", "message": "hi"})).json()["id"]
    reads: dict[str, int] = {"list_after": 0, "list_": 0, "get": 0}

    def counted(name: str, module: Any) -> None:
        real = getattr(module, name)

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            reads[name] += 1
            return await real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counted("list_after", messages)
    counted("list_", messages)
    counted("get", loops)
    seen: list[list[str]] = [[] for _ in range(n)]
    async with (
        live_server(app) as base,
        httpx.AsyncClient(
            base_url=base, timeout=30, limits=httpx.Limits(max_connections=n + 5)
        ) as http,
        contextlib.AsyncExitStack() as stack,
    ):
        await asyncio.gather(
            *(
                stack.enter_async_context(held_stream(http, lid, TOKEN, seen[i], protocol))
                for i in range(n)
            )
        )
        opened = dict(reads)
        # n streams opened: one existence check each, the rest shared.
        assert opened["list_"] < n / 4, opened
        # An event every stream reacts to: each re-reads the loop's new messages.
        before = dict(reads)
        r = await client.post(f"/v1/loops/{lid}/pause")
        assert r.status_code == 200, r.text

        async def every_stream_ended() -> bool:
            return all(any("paused" in line for line in lines) for lines in seen)

        await eventually(every_stream_ended, within=20)
        after = {k: reads[k] - before[k] for k in reads}
        assert after["list_after"] + after["get"] < n / 4, after


async def test_idle_event_feed_streams_do_not_poll_the_database(
    app: FastAPI, live_server, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """GET /v1/events as SSE: a caught-up client waits on the process's one horizon poll
    instead of querying once a second itself; it still gets new events; it holds a slot."""
    from agentd.store import events

    app.state.stream_slots.limit = 1000
    n = 30
    feed_reads = 0
    real = events.read_feed

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal feed_reads
        feed_reads += 1
        return await real(*args, **kwargs)

    monkeypatch.setattr(events, "read_feed", counted)
    seen: list[list[str]] = [[] for _ in range(n)]
    sse = {"Accept": "text/event-stream", **_auth(READ_TOKEN)}
    async with (
        live_server(app) as base,
        httpx.AsyncClient(
            base_url=base, timeout=30, limits=httpx.Limits(max_connections=n + 5)
        ) as http,
        contextlib.AsyncExitStack() as stack,
    ):

        async def follow(lines: list[str]) -> None:
            async with http.stream("GET", "/v1/events", headers=sse) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    lines.append(line)

        tasks = [asyncio.create_task(follow(seen[i])) for i in range(n)]
        for task in tasks:
            stack.callback(task.cancel)

        async def all_read_once() -> bool:
            return feed_reads >= n

        await eventually(all_read_once)
        idle_from = feed_reads
        await asyncio.sleep(3)  # three of the old per-client polls: none of them now
        assert feed_reads - idle_from < n / 2, feed_reads - idle_from
        key = app.state.stream_slots.key(f"Bearer {READ_TOKEN}")
        assert app.state.stream_slots.held(key) == n
        # Something happens: every client gets it, each with one read.
        await client.post("/v1/loops", json={"agent": "calc", "message": "hi"})

        async def everyone_saw_it() -> bool:
            return all(any(line.startswith("event: loop.") for line in s) for s in seen)

        await eventually(everyone_saw_it, within=15)
        for task in tasks:
            task.cancel()

        async def all_gone() -> bool:
            return app.state.stream_slots.held(key) == 0 and app.state.events_tail._task is None

        await eventually(all_gone)  # the slots are back and the horizon poll has stopped

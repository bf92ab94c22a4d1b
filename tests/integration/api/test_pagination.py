from __future__ import annotations

import asyncio

import httpx

from agentd.engine.lifecycle import Lifecycle


async def test_pages_have_no_duplicates_and_no_gaps_while_loops_are_inserted(
    client: httpx.AsyncClient, app_state
) -> None:  # type: ignore[no-untyped-def]
    lifecycle: Lifecycle = app_state.lifecycle
    before = [
        (await lifecycle.start(agent="calc", message=f"m{i}", state={"llm": "x"})).id
        for i in range(23)
    ]
    inserting = asyncio.Event()
    during: list[object] = []

    async def insert_while_paging() -> None:
        inserting.set()
        for i in range(30):
            during.append((await lifecycle.start(agent="calc", message=f"d{i}")).id)
            await asyncio.sleep(0)

    task = asyncio.create_task(insert_while_paging())
    await inserting.wait()
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"limit": 4, **({"cursor": cursor} if cursor else {})}
        r = await client.get("/v1/loops", params=params)
        assert r.status_code == 200
        page = r.json()
        seen += [x["id"] for x in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    await task
    assert len(seen) == len(set(seen)), "a loop appeared on two pages"
    # Every loop that existed before paging began was listed, newest first.
    listed_before = [s for s in seen if s in {str(b) for b in before}]
    assert listed_before == [str(b) for b in reversed(before)]
    assert pages >= 6
    # And a full listing afterwards is strictly ordered newest first.
    everything = (await client.get("/v1/loops", params={"limit": 200})).json()["items"]
    keys = [(x["created_at"], x["id"]) for x in everything]
    assert keys == sorted(keys, reverse=True) and len(keys) == 53

"""agentd.client against a real `agentd up`: the routes beyond loops (state, the events
feed, costs, providers, webhooks, schedules, `max_cost` on start, steering sends), and
retries on connection errors through a proxy that drops connections before the server
sees them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest

from agentd.client import AsyncClient, Client, errors
from agentd.testing.engine import eventually
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.up import AgentdUp, TcpProxy

pytestmark = [pytest.mark.acceptance]

CONFIG = '[agents.calc]\nclass = "agentd.testing.agents:CalcAgent"\n'


class DroppingProxy(TcpProxy):
    """Forwards to `target`, except that the next `drops` requests (on new or kept-alive
    connections) get their connection aborted as they arrive: the client sees the
    connection dropped, the server sees nothing."""

    def __init__(self, target: tuple[str, int], drops: int = 0) -> None:
        super().__init__(target)
        self.drops = drops
        self.dropped = 0

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            tr, tw = await asyncio.open_connection(*self.target)
        except OSError:
            w.close()
            return
        self._writers |= {w, tw}

        async def upstream() -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await r.read(65536):
                    if self.drops > 0:
                        self.drops -= 1
                        self.dropped += 1
                        w.transport.abort()
                        tw.transport.abort()
                        return
                    tw.write(data)
                    await tw.drain()
            tw.close()

        try:
            await asyncio.gather(upstream(), self._pipe(tr, w))
        finally:
            self._writers -= {w, tw}


@pytest.fixture
async def up(database_url: str, tmp_path: Path) -> AsyncIterator[AgentdUp]:
    config = tmp_path / "agentd.toml"
    config.write_text(CONFIG)
    async with AgentdUp(database_url=database_url, config=config) as proc:
        yield proc


async def test_async_client_covers_state_feed_costs_providers_webhooks_and_schedules(
    up: AgentdUp,
) -> None:
    async with AsyncClient(up.base_url, up.token) as agentd:
        loop = await agentd.start(
            "calc", "hi", state={"llm": "http://127.0.0.1:9"}, max_cost=Decimal("0.25")
        )
        assert loop.state["max_cost"] == "0.25"
        await agentd.pause(loop.id)
        st = await agentd.get_state(loop.id)
        patched = await agentd.patch_state(loop.id, {"tier": "gold"}, if_match=st.version)
        assert patched.state["tier"] == "gold" and patched.version == st.version + 1
        with pytest.raises(errors.ApiError) as stale:
            await agentd.patch_state(loop.id, {"tier": "x"}, if_match=st.version)
        assert stale.value.status == 412

        async def feed() -> list[str]:  # the feed shows events once they settle
            page = await agentd.feed(loop=loop.id, types=["loop.paused"])
            return [e.name for e in page.items]

        assert await eventually(feed) == ["loop.paused"]
        assert (await agentd.costs(agent="calc")).model_dump()  # answers, typed
        assert (await agentd.providers()).model_dump() is not None
        assert await agentd.webhooks() == []
        assert (await agentd.webhook_deliveries()).items == []
        assert await agentd.input_requests(loop.id) == []
        sent = await agentd.send(loop.id, "more", mode="inject", idempotency_key="c1")
        assert sent.sent.status == "applied"  # paused: at rest, taken at once
        assert [m.content for m in await agentd.sent_messages(loop.id)] == ["more"]
        made = await agentd.create_schedule("nightly", "calc", "run", cron="0 3 * * *")
        assert made.name == "nightly" and made.enabled
        assert [s.name for s in await agentd.schedules()] == ["nightly"]
        assert not (await agentd.pause_schedule("nightly")).enabled
        assert (await agentd.resume_schedule("nightly")).enabled
        assert (await agentd.get_schedule("nightly")).cron == "0 3 * * *"
        await agentd.delete_schedule("nightly")
        assert await agentd.schedules() == []


async def test_idempotent_calls_are_retried_after_a_dropped_connection(up: AgentdUp) -> None:
    async with (
        FakeLLM() as fake,
        DroppingProxy(("127.0.0.1", up.port)) as proxy,
    ):
        fake.add(Rule(reply=Reply(content="late", delay_before_first_byte=60)))
        url = f"http://127.0.0.1:{proxy.port}"
        async with AsyncClient(url, up.token) as agentd:
            proxy.drops = 1
            loop = await agentd.start(
                "calc", "hi", state={"llm": fake.base_url}, idempotency_key="retry-me"
            )
            assert proxy.dropped == 1
            proxy.drops = 1
            assert (await agentd.get(loop.id)).id == loop.id
            assert proxy.dropped == 2
            proxy.drops = 1
            assert (await agentd.freeze(loop.id)).frozen  # freeze is idempotent
            assert proxy.dropped == 3
            # resume is not: a dropped connection is the caller's to judge (a retry that
            # reached the server would have answered 409, the loop being active)
            proxy.drops = 1
            with pytest.raises(errors.TransportError):
                await agentd.resume(loop.id)
            assert proxy.dropped == 4
            listed = [x.id for x in (await agentd.list()).items]
        assert listed.count(loop.id) == 1  # the retried start started one loop

        def sync_drive() -> bool:
            with Client(url, up.token) as agentd:
                proxy.drops = 2  # two drops in a row: still within the two retries
                return agentd.get(loop.id).frozen

        assert await asyncio.to_thread(sync_drive)
        assert proxy.dropped == 6
        with Client(url, up.token, retries=0) as agentd:
            proxy.drops = 1
            with pytest.raises(errors.TransportError):
                await asyncio.to_thread(agentd.get, loop.id)
        async with AsyncClient(up.base_url, up.token) as agentd:
            await agentd.stop(loop.id)

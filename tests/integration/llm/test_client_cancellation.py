"""However often a model call is cancelled, and wherever the cancels land, the provider's
connection is cut at once (so it stops streaming, and billing) and the pool is left clean."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from agentd.llm import http_pool
from agentd.llm.client import LLMClient
from agentd.llm.types import LLMRequest, Message, Provider, StreamDelta
from agentd.testing.fake_llm import FakeLLM, Reply, Rule


def _request(fake: FakeLLM) -> LLMRequest:
    return LLMRequest(
        provider=Provider(base_url=fake.base_url, model="m", api_token="tok", connect_timeout=2.0),
        messages=[Message("user", "hi")],
        stream=True,
    )


@pytest.mark.parametrize("phase", ["streaming", "before_first_byte"])
@pytest.mark.parametrize("cancels", [1, 2, 3])
@pytest.mark.parametrize("yields_between", [0, 1, 2, 4])
async def test_every_cancel_cuts_the_provider_connection(
    fake: FakeLLM, phase: str, cancels: int, yields_between: int
) -> None:
    slow = Reply(content="x" * 2000, chunk_size=1, chunk_delay=0.01)  # ~20 s to the end
    if phase == "before_first_byte":
        slow = Reply(content="late", delay_before_first_byte=30)
    fake.add(Rule(reply=slow, times=1))
    pool = http_pool.AsyncioTransport(
        ssl_context=httpx.create_ssl_context(), limits=httpx.Limits(max_connections=10)
    )
    client = LLMClient(http=httpx.AsyncClient(transport=pool))
    try:
        streaming = asyncio.Event()

        async def on_delta(_: StreamDelta) -> None:
            streaming.set()

        task = asyncio.create_task(client.complete(_request(fake), on_delta=on_delta))
        if phase == "streaming":
            await asyncio.wait_for(streaming.wait(), 5)
        else:
            await fake.wait_for_requests(1)
        for n in range(cancels):
            if n:  # let the previous cancel start unwinding, then cancel it again
                for _ in range(yields_between):
                    await asyncio.sleep(0)
            task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The server sees the hang-up promptly, not at the end of its answer.
        await asyncio.wait_for(fake.wait_for_disconnects(1), 3)
        assert pool.in_use == 0
        assert all(c.is_idle() or c.is_closed() for c in pool.connections)
        # And the client still works.
        r = await asyncio.wait_for(client.complete(_request(fake)), 5)
        assert r.content
    finally:
        await pool.aclose()

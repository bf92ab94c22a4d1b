"""B12's bare client: `--n` concurrent streaming requests to the fake model with httpx and
httpx-sse, each event's JSON decoded and its text kept, no database: what consuming the
same tokens at the same concurrency costs a plain Python client. Prints one JSON line:
{"cpu_s", "wall_s", "tokens"} (its own CPU from the first request to the last event), and
with `--lag-every K` "arrivals": each k-th stream's token arrival times by the model's tag.

    python -m bench.b12_bare --url http://127.0.0.1:P --n 500 [--event-loop auto]
                             [--client httpx-sse|agentd] [--lag-every K]

`--client agentd` reads the same streams with agentd's own LLMClient (its pool, SSE decoder,
dialect parser and wire capture; each delta handed to a callback), no database: what the
worker's model client costs, apart from everything else a turn does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from agentd import event_loop
from agentd.llm.client import LLMClient
from agentd.llm.types import LLMRequest, Message, Provider, StreamDelta

# Token arrival times (time.monotonic(), comparable with the model's) of the streams whose
# index is a multiple of --lag-every, by the model's tag for them: the bare client's own lag.
ARRIVALS: dict[str, list[float]] = {}


async def one(client: httpx.AsyncClient, i: int, lag_every: int = 0) -> int:
    body = {
        "model": "fake",
        "stream": True,
        "messages": [
            {"role": "system", "content": "bench"},
            {"role": "user", "content": f"bare {i}"},
        ],
    }
    parts: list[str] = []
    arrivals = ARRIVALS.setdefault(str(i), []) if lag_every and i % lag_every == 0 else None
    async with aconnect_sse(client, "POST", "/v1/chat/completions", json=body) as source:
        async for sse in source.aiter_sse():
            if sse.data == "[DONE]":
                break
            for choice in json.loads(sse.data).get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    parts.append(text)
                    if arrivals is not None:
                        arrivals.append(time.monotonic())
    return len(parts)


async def one_agentd(client: LLMClient, url: str, i: int) -> int:
    parts: list[str] = []

    async def on_delta(d: StreamDelta) -> None:
        parts.append(d.content)

    request = LLMRequest(
        provider=Provider(base_url=url, model="fake"),
        messages=[Message("system", "bench"), Message("user", f"bare {i}")],
        stream=True,
    )
    await client.complete(request, on_delta=on_delta)
    return len(parts)


async def main_agentd(a: argparse.Namespace) -> None:
    client = LLMClient()
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        tokens = sum(await asyncio.gather(*(one_agentd(client, a.url, i) for i in range(a.n))))
        t1, c1 = time.perf_counter(), time.process_time()
    finally:
        await client.aclose()
    print(json.dumps({"cpu_s": c1 - c0, "wall_s": t1 - t0, "tokens": tokens}))


async def main(a: argparse.Namespace) -> None:
    if a.client == "agentd":
        return await main_agentd(a)
    limits = httpx.Limits(max_connections=a.n + 16, max_keepalive_connections=a.n + 16)
    async with httpx.AsyncClient(base_url=a.url, limits=limits, timeout=120) as client:
        t0, c0 = time.perf_counter(), time.process_time()
        streams = range(a.first, a.first + a.n)
        tokens = sum(await asyncio.gather(*(one(client, i, a.lag_every) for i in streams)))
        t1, c1 = time.perf_counter(), time.process_time()
    out: dict[str, Any] = {"cpu_s": c1 - c0, "wall_s": t1 - t0, "tokens": tokens}
    if a.lag_every:
        out["arrivals"] = ARRIVALS
    print(json.dumps(out))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--first", type=int, default=0, help="index of the first stream (its tag)")
    p.add_argument("--client", default="httpx-sse", choices=["httpx-sse", "agentd"])
    p.add_argument(
        "--lag-every", type=int, default=0, help="record token arrivals of every k-th stream"
    )
    p.add_argument("--event-loop", default="auto", choices=["auto", "asyncio", "uvloop"])
    a = p.parse_args()
    with asyncio.Runner(loop_factory=event_loop.factory(a.event_loop)) as runner:
        runner.run(main(a))

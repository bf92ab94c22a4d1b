"""HTTP client cost per request: httpx with its default (anyio) backend vs agentd's pooled
client (asyncio backend), c concurrent POSTs to the fake LLM, CPU ms per request of this
process. Alternates the two in rounds so a neighbour's load hits both alike.

    python -m bench.http_micro [--n 3000 --concurrency 16 --rounds 3]
    python -m bench.http_micro --one [--n 3000 --concurrency 16]   # agentd's client alone:
        one figure, for two trees side by side (bench/README.md, "Two trees")
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx

from agentd.llm.http_pool import pooled_client
from bench.b11_userpath import rules
from bench.common import fake_llm

BODY = b'{"model":"fake-model","messages":[{"role":"user","content":"go"}]}'


async def run(client: httpx.AsyncClient, url: str, n: int, c: int) -> tuple[float, float]:
    sem = asyncio.Semaphore(c)

    async def one() -> None:
        async with sem:
            r = await client.post(url, content=BODY, headers={"content-type": "application/json"})
            r.raise_for_status()

    await asyncio.gather(*(one() for _ in range(c)))  # warm the pool
    t0, p0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one() for _ in range(n)))
    return 1000 * (time.process_time() - p0) / n, n / (time.perf_counter() - t0)


async def main_async(a: argparse.Namespace) -> None:
    llm = fake_llm(rules())
    url = f"http://127.0.0.1:{llm.port}/v1/chat/completions"
    try:
        if a.one:
            async with pooled_client(max_connections=1000, max_keepalive=200) as client:
                cpu, rps = await run(client, url, a.n, a.concurrency)
            print(f"CPU_MS {cpu:.4f} RPS {rps:.0f}")
            return
        makers = {
            "httpx default": lambda: httpx.AsyncClient(
                limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200)
            ),
            "agentd pooled": lambda: pooled_client(max_connections=1000, max_keepalive=200),
        }
        res: dict[str, list[tuple[float, float]]] = {k: [] for k in makers}
        for _ in range(a.rounds):
            for name, make in makers.items():
                async with make() as client:
                    res[name].append(await run(client, url, a.n, a.concurrency))
        for name, xs in res.items():
            cpu = sorted(x[0] for x in xs)[len(xs) // 2]
            rps = sorted(x[1] for x in xs)[len(xs) // 2]
            print(f"{name:26s} CPU {cpu:.3f} ms/request  {rps:.0f} req/s (median of {len(xs)})")
    finally:
        llm.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=3000)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--uvloop", action="store_true")
    p.add_argument("--one", action="store_true", help="agentd's client alone, one figure")
    a = p.parse_args()
    if a.uvloop:
        import uvloop

        uvloop.run(main_async(a))
    else:
        asyncio.run(main_async(a))


if __name__ == "__main__":
    main()

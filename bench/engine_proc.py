"""Run one agentd Engine in this process with bench instrumentation.

Used in-process by the B1/B2/B3 scenarios (`EngineHarness`) and as a child process
(`python -m bench.engine_proc ...`) by B5, B6 and the concurrency/control scenarios:
it prints `LISTENING 0` when started and writes one JSON line of stats per second
(RSS, event-loop lag, in-flight, renewer time) to --stats.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from typing import Any

from agentd.db import pool as dbpool
from agentd.engine.service import Engine
from agentd.pipeline.stacks import Stacks
from agentd.settings import Settings
from agentd.store import jobs as jobs_store
from bench import agents
from bench.common import CountingConnection

CLAIM_T: dict[str, float] = {}  # loop id / tool call id -> perf_counter at claim start
LAT: dict[str, list[float]] = {"llm": [], "tool": []}
WAKE: list[tuple[str, float]] = []  # (loop id, time.time() when the claim returned)


def instrument() -> None:
    if hasattr(jobs_store, "claim_llm_many"):  # batch claims (issue 41): the worker's calls
        _instrument_batches()
    else:  # an agentd that claims one job per call (before/after runs)
        _instrument_single()
    _instrument_chained()


def _instrument_batches() -> None:
    orig_llm, orig_tool = jobs_store.claim_llm_many, jobs_store.claim_tool_many

    async def claim_llm_many(conn: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        claims = await orig_llm(conn, **kw)
        for c in claims:
            if c.loop is not None:
                CLAIM_T[str(c.loop.id)] = t0
                WAKE.append((str(c.loop.id), time.time()))
        return claims

    async def claim_tool_many(conn: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        claims = await orig_tool(conn, **kw)
        for c in claims:
            if c.tool_call is not None:
                CLAIM_T[f"t{c.tool_call.id}"] = t0
        return claims

    jobs_store.claim_llm_many = claim_llm_many  # type: ignore[assignment]
    jobs_store.claim_tool_many = claim_tool_many  # type: ignore[assignment]


def _instrument_single() -> None:
    orig_llm, orig_tool = jobs_store.claim_llm, jobs_store.claim_tool

    async def claim_llm(conn: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        c = await orig_llm(conn, **kw)
        if c is not None and c.loop is not None:
            CLAIM_T[str(c.loop.id)] = t0
            WAKE.append((str(c.loop.id), time.time()))
        return c

    async def claim_tool(conn: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        c = await orig_tool(conn, **kw)
        if c is not None and c.tool_call is not None:
            CLAIM_T[f"t{c.tool_call.id}"] = t0
        return c

    jobs_store.claim_llm = claim_llm  # type: ignore[assignment]
    jobs_store.claim_tool = claim_tool  # type: ignore[assignment]


def _instrument_chained() -> None:
    # Chained jobs (a call leased by its turn's finalize, a turn claimed by its last call's
    # finish) have no claim: time them from the handoff.
    from agentd.engine.worker import Worker

    if not hasattr(Worker, "run_leased_turn"):  # an agentd without chaining (before/after runs)
        return
    orig_leased = Worker.run_leased_tool

    def run_leased_tool(self: Any, claim: Any, lease_token: Any) -> None:
        CLAIM_T[f"t{claim.tool_call.id}"] = time.perf_counter()
        orig_leased(self, claim, lease_token)

    Worker.run_leased_tool = run_leased_tool  # type: ignore[method-assign]

    orig_turn = Worker.run_leased_turn

    def run_leased_turn(self: Any, loop: Any, prefetch: Any) -> None:
        CLAIM_T[str(loop.id)] = time.perf_counter()  # a chained turn: from its handoff
        orig_turn(self, loop, prefetch)

    Worker.run_leased_turn = run_leased_turn  # type: ignore[method-assign]


class Done:
    """Terminal middleware: claim start -> finalizer commit returned, per job."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, ctx: Any) -> None:
        await self.app(ctx)
        if hasattr(ctx, "execution_token"):
            t0 = CLAIM_T.pop(str(ctx.loop.id), None)
            if t0 is not None:
                LAT["llm"].append(time.perf_counter() - t0)
        else:
            t0 = CLAIM_T.pop(f"t{ctx.tool_call.id}", None)
            if t0 is not None:
                LAT["tool"].append(time.perf_counter() - t0)


def stacks() -> Stacks:
    return Stacks(configure_llm=lambda b: b.use(Done), configure_tool=lambda b: b.use(Done))


class EngineHarness:
    def __init__(
        self,
        url: str,
        settings: Settings,
        llm: Any = None,
        queues: list[str] | None = None,
        count_rt: bool = True,
    ) -> None:
        self.url = url
        self.settings = settings
        self.llm = llm
        self.queues = queues or list(settings.queues)
        self.count_rt = count_rt

    async def __aenter__(self) -> EngineHarness:
        instrument()
        kw: dict[str, Any] = {"connection_class": CountingConnection} if self.count_rt else {}
        self.pool = await dbpool.create_pool(
            self.url, min_size=1, max_size=self.settings.db_pool_max, **kw
        )
        self.engine = Engine(
            settings=self.settings,
            pool=self.pool,
            registry=agents.registry(),
            url=self.url,
            queues=self.queues,
            stacks=stacks(),
            llm=self.llm,
        )
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.engine.run(self.stop))
        started = asyncio.ensure_future(self.engine.started.wait())
        await asyncio.wait({self.task, started}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        if self.task.done():
            self.task.result()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.task, 60)
        await self.pool.close()


async def lag_monitor(samples: list[float], period: float = 0.05) -> None:
    loop = asyncio.get_running_loop()
    while True:
        t = loop.time()
        await asyncio.sleep(period)
        samples.append(max(0.0, loop.time() - t - period))


async def _child(a: argparse.Namespace) -> None:
    import psutil

    from agentd import logs

    logs.configure("console", "warning")  # unconfigured structlog prints debug lines

    overrides = json.loads(a.settings or "{}")
    settings = Settings(database_url=a.url, log_level="warning", **overrides)
    llm = agents.ZeroLLM(rounds=a.rounds) if a.llm == "zero" else None
    renew_t: list[float] = []
    from agentd.engine.lease_renewer import LeaseRenewer

    orig = LeaseRenewer.renew_once

    async def timed(self: Any) -> None:
        t0 = time.perf_counter()
        await orig(self)
        renew_t.append(time.perf_counter() - t0)

    LeaseRenewer.renew_once = timed  # type: ignore[method-assign]
    lag: list[float] = []
    proc = psutil.Process()
    async with EngineHarness(a.url, settings, llm=llm, count_rt=False) as h:
        mon = asyncio.create_task(lag_monitor(lag))
        print("LISTENING 0", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        import signal

        for s in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(s, stop.set)
        fd = open(a.stats, "a") if a.stats else None
        wake_i = 0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            if fd:
                rec = {
                    "t": time.time(),
                    "rss": proc.memory_info().rss,
                    "lag": lag[:],
                    "in_flight": h.engine.worker.in_flight,
                    "renew": renew_t[:],
                    "renewals": h.engine.renewer.renewal_count,
                    "wake": WAKE[wake_i:],
                    "lat_llm": LAT["llm"][:],
                }
                wake_i = len(WAKE)
                lag.clear()
                renew_t.clear()
                LAT["llm"].clear()
                fd.write(json.dumps(rec) + "\n")
                fd.flush()
        mon.cancel()


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--llm", choices=["zero", "http"], default="http")
    p.add_argument("--rounds", type=int, default=0)
    p.add_argument("--settings", help="JSON of Settings overrides")
    p.add_argument("--stats")
    a = p.parse_args(argv)
    asyncio.run(_child(a))


if __name__ == "__main__":
    main(sys.argv[1:])
